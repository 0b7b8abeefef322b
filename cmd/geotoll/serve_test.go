package main

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

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
// start-up's reads waited out its own bound before (about 25 s in all, the
// listener not yet bound, /healthz unanswered) and warned of its own
// failure; now one warning says the database does not answer, and the
// background refreshes read the rest once it does.
func TestOpenServesWhenTheDatabaseDoesNotAnswer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Database.URL = "postgres://nobody@" + ln.Addr().String() + "/none?sslmode=disable"
	var logs logBuffer
	m := &Main{Config: cfg, Logger: slog.New(slog.NewJSONHandler(&logs, nil)), ModelShelf: testShelf}
	if err := m.Open(t.Context()); err != nil {
		t.Fatalf("Open with a database that does not answer: %v; want it to serve without it", err)
	}
	defer m.Close()
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
}
