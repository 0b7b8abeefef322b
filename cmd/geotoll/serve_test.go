package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/testenv"
)

// The requests' pool's sessions are application_name geotoll and the
// server's own work's geotoll-background, or both the one the URL names:
// servers sharing a database are told apart by it. Parallel: each server
// reads the names of its own pools' sessions, no one else's.
func TestServePoolApplicationName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ query, want, background string }{
		{"", "geotoll", "geotoll-background"},
		{"application_name=geotoll-east", "geotoll-east", "geotoll-east"},
	} {
		m := startMain(t, func(c *Config) {
			if tc.query != "" {
				sep := "?"
				if strings.Contains(c.Database.URL, "?") {
					sep = "&"
				}
				c.Database.URL += sep + tc.query
			}
		})
		var got, background string
		if err := m.Pool.QueryRow(context.Background(), "SELECT current_setting('application_name')").Scan(&got); err != nil || got != tc.want {
			t.Errorf("URL with %q: application_name %q, %v; want %q", tc.query, got, err, tc.want)
		}
		if err := m.Background.QueryRow(context.Background(), "SELECT current_setting('application_name')").Scan(&background); err != nil || background != tc.background {
			t.Errorf("URL with %q: the background pool's application_name %q, %v; want %q", tc.query, background, err, tc.background)
		}
	}
}

// The server's own work runs plain statements too (the registry, the
// tables' change detectors): its pool's sessions are read only, each
// statement bounded, whatever role the URL names — here the schema owner,
// which has neither as a default.
func TestBackgroundSessionsAreReadOnlyAndBounded(t *testing.T) {
	t.Parallel()
	m := startMain(t, func(c *Config) { c.Database.URL = testenv.DatabaseURL(t) })
	var readOnly, timeout string
	if err := m.Background.QueryRow(context.Background(),
		"SELECT current_setting('default_transaction_read_only'), current_setting('statement_timeout')").Scan(&readOnly, &timeout); err != nil {
		t.Fatal(err)
	}
	if readOnly != "on" || timeout != BackgroundStatementTimeout {
		t.Errorf("background sessions: default_transaction_read_only %s, statement_timeout %s; want on, %s", readOnly, timeout, BackgroundStatementTimeout)
	}
	if _, err := m.Background.Exec(context.Background(), "CREATE TEMP TABLE background_write (x int)"); err == nil {
		t.Error("a background session wrote")
	}
}

// A database that accepts connections and answers nothing (partitioned,
// paused) at start-up: Open pings it once, then serves without it. Each of
// start-up's reads waited out its own bound before (about 22 s in all, the
// listener not yet bound, /healthz unanswered) and warned of its own
// failure; now one warning says the database does not answer. Once it
// answers, what start-up could not read is read: the keys, the layers'
// storage and their largest rows (a layer made heavy here, whose Heavy
// only that read can tell).
func TestOpenServesWhenTheDatabaseDoesNotAnswer(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	gate := newHeldProxy(t, u.Host)
	u.Host = gate.addr
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Database.URL = u.String()
	cfg.Tiles.StorageRefresh = time.Second
	for i := range cfg.Layers {
		if cfg.Layers[i].Name == "geofences" { // rows of up to 25 vertices, read whole
			cfg.Layers[i].Subdivide.Off, cfg.Layers[i].Subdivide.MaxVertices = true, 8
		}
	}
	var logs logBuffer
	m := &Main{Config: cfg, Logger: slog.New(slog.NewJSONHandler(&logs, nil)), ModelShelf: testShelf}
	if err := m.Open(t.Context()); err != nil {
		t.Fatalf("Open with a database that does not answer: %v; want it to serve without it", err)
	}
	out := logs.String()
	if n := strings.Count(out, "serving without the database until it answers"); n != 1 {
		t.Errorf("%d warnings that the database does not answer, want 1:\n%s", n, out)
	}
	for _, step := range []string{"API keys not loaded yet", "serving registry not read", "largest rows not read",
		"geofence layers' storage not read", "layers not checked"} {
		if strings.Contains(out, step) {
			t.Errorf("start-up waited on the database for a step (%q):\n%s", step, out)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	gate.release()
	layer := m.TileCatalog.Layer("geofences")
	deadline := time.Now().Add(30 * time.Second)
	for layer.Heavy() == nil || m.keys.Age() < 0 {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the database answered: heavy %+v, keys' age %v; want the largest rows and the keys read", layer.Heavy(), m.keys.Age())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2500 * time.Millisecond) // two more refreshes of the storage
	if n := strings.Count(logs.String(), "tile layer is heavy"); n != 1 {
		t.Errorf("%d warnings that the layer is heavy over three refreshes, want 1:\n%s", n, logs.String())
	}
}

// heldProxy passes TCP connections on to target once released: until
// then it accepts them and answers nothing, as a database that is paused
// or partitioned away.
type heldProxy struct {
	addr     string
	released chan struct{}
	once     sync.Once
}

func newHeldProxy(t *testing.T, target string) *heldProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &heldProxy{addr: ln.Addr().String(), released: make(chan struct{})}
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		p.release()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			go func() {
				<-p.released
				s, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				track(s)
				go func() { _, _ = io.Copy(s, c); s.Close() }()
				_, _ = io.Copy(c, s)
				c.Close()
			}()
		}
	}()
	return p
}

func (p *heldProxy) release() { p.once.Do(func() { close(p.released) }) }

// A configuration that discovers its tile layers cannot start without the
// database: Open fails, naming discovery and the database, without first
// saying it serves without it.
func TestOpenWithDiscoveryFailsWhenTheDatabaseDoesNotAnswer(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = newHeldProxy(t, u.Host).addr
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Database.URL = u.String()
	cfg.Tiles.Discover.Schemas = []string{"public"}
	var logs logBuffer
	m := &Main{Config: cfg, Logger: slog.New(slog.NewJSONHandler(&logs, nil)), ModelShelf: testShelf}
	err = m.Open(t.Context())
	defer m.Close()
	if err == nil || !strings.Contains(err.Error(), "tiles.discover: the database did not answer") {
		t.Fatalf("Open: %v; want tiles.discover's failure for want of the database", err)
	}
	if strings.Contains(logs.String(), "serving without the database") {
		t.Errorf("said it serves without the database, then failed:\n%s", logs.String())
	}
}

// checkHeavy tries each layer's largest rows once: a read that fails is
// warned of and not returned for another try (each try scans the
// layer's table), while the layers a cancelled start-up did not try are
// returned, for refreshTiles to read once the database answers.
func TestCheckHeavyReturnsOnlyTheLayersItDidNotTry(t *testing.T) {
	cfg := DefaultConfig()
	catalog, err := cfg.tileCatalog(nil)
	if err != nil {
		t.Fatal(err)
	}
	down, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	var logs logBuffer
	m := &Main{Config: cfg, Background: down, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	layers := catalog.Layers()
	if untried := m.checkHeavy(t.Context(), layers); len(untried) != 0 {
		t.Errorf("a database that refuses: %d layers returned to try again, want none", len(untried))
	}
	if n := strings.Count(logs.String(), "largest rows not read"); n == 0 {
		t.Errorf("no warning of the reads that failed:\n%s", logs.String())
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if untried := m.checkHeavy(ctx, layers); len(untried) != len(layers) {
		t.Errorf("a cancelled start-up: %d layers returned to try again, want all %d", len(untried), len(layers))
	}
}
