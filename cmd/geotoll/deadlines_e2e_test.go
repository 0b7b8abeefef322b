package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/toll"
)

// stuckView creates {s}.stuck, a layer of one point whose every read first
// cuts a star-shaped polygon of 150,000 vertices into pieces of 256: the
// first cut runs for seconds (about 4 s on 2 idle cores, PostGIS 3.3)
// without looking at interrupts, so neither statement_timeout nor a cancel
// request stops it before it is done. The point depends on the cut, so
// every tile's query runs it.
func stuckView(exec func(string)) {
	exec(`CREATE TABLE {s}.huge AS
		SELECT ST_SetSRID(ST_MakePolygon(ST_AddPoint(l, ST_StartPoint(l))), 3857) AS g FROM (
			SELECT ST_MakeLine(ST_MakePoint(r * cos(a), r * sin(a)) ORDER BY i) AS l FROM (
				SELECT i, 2 * pi() * i / 150000 AS a,
				       1000000 + 200000 * sin(i * 0.37) + 100000 * ((i::bigint * 7919) % 13) / 13.0 AS r
				FROM generate_series(0, 149999) i) p) q`)
	exec(`CREATE VIEW {s}.stuck AS
		SELECT 1::bigint AS id, ST_SetSRID(ST_MakePoint(1 + z.n * 0, 1), 3857) AS geom
		FROM {s}.huge h, LATERAL (SELECT count(*) AS n FROM ST_Subdivide(h.g, 256)) z`)
	exec(`GRANT SELECT ON {s}.huge, {s}.stuck TO geotoll_reader`)
}

// stuckPrices is the pricing of the servers that serve a stuck view: by
// size. A density model of the view would run its cut in the background,
// for tens of seconds on a loaded machine (every stuck statement at once
// shares the cores), and drained would wait for that build too. Requests
// of a view whose model is still building are priced by their size
// anyway, as they were here while the model built; so are the tiles'
// statement budgets, which a model's price could cut before the backend
// reaches the cut.
func stuckPrices(c *Config) { c.Throttle.Pricing = PricingSize }

// runningIn counts, through the owner pool, the backends running a
// statement that reads a relation of schema: that holds a lock on one (a
// statement's text, which pg_stat_activity cuts after 1 kB, may name the
// schema too late to be seen).
func runningIn(t *testing.T, owner *pgxpool.Pool, schema string) int {
	return runningFor(t, owner, schema)
}

// requestsRunningIn counts only the statements the server runs for
// requests (its requests' pool, application_name geotoll), not those of
// its own work (geotoll-background: checks, refreshes) nor the builds of
// its price models (density.ApplicationName).
func requestsRunningIn(t *testing.T, owner *pgxpool.Pool, schema string) int {
	return runningFor(t, owner, schema, "geotoll")
}

// runningFor counts the statements running in schema, of the sessions
// named apps (application_name) or, with none, of every session.
func runningFor(t *testing.T, owner *pgxpool.Pool, schema string, apps ...string) int {
	t.Helper()
	var n int
	err := owner.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_stat_activity a
		WHERE a.state = 'active' AND a.pid <> pg_backend_pid()
		  AND (cardinality($2::text[]) = 0 OR a.application_name = ANY($2)) AND EXISTS (
			SELECT FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE l.pid = a.pid AND n.nspname = $1)`, schema, append([]string{}, apps...)).Scan(&n)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return n
}

// drained waits (at most 3 minutes: the stuck statements run for seconds
// each, longer on a busy machine) until no statement of schema runs.
func drained(t *testing.T, owner *pgxpool.Pool, schema string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for runningIn(t, owner, schema) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("statements of %s still running after 3 minutes", schema)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A tile whose query is cut — by its statement_timeout (a sleep), or by the
// client because the backend does not stop (the stuck cut) — answers 503
// with Retry-After and a problem body before the write timeout: never an
// empty reply. Metrics call both statement timeouts, and
// count the statement that outlives its answer until it stops.
//
// Not parallel, like the next test: the stuck statements keep a core busy
// for seconds, which would push other tests' queries past their timeouts;
// each waits for its statements to stop before it returns.
func TestEndToEndCutQueryAnswers503(t *testing.T) {
	schema, exec := fixtureSchema(t)
	stuckView(exec)
	exec(`CREATE VIEW {s}.sleepy AS SELECT 1::bigint AS id, ST_SetSRID(ST_MakePoint(1, 1), 3857) AS geom FROM (SELECT pg_sleep(5)) z`)
	exec(`GRANT SELECT ON {s}.sleepy TO geotoll_reader`)
	logs := &logBuffer{}
	m := startLogging(t, func(c *Config) {
		stuckPrices(c)
		c.HTTP.RequestTimeout, c.HTTP.WriteTimeout = 3*time.Second, 4*time.Second
		c.Throttle.Tiers[toll.AnonymousTier] = TierConfig{Rate: 1000, Capacity: 1000}
		c.Layers = append(c.Layers,
			LayerConfig{Layer: layerFor(schema+".sleepy", 300*time.Millisecond)},
			// 1 s: a shorter timeout may expire, on a loaded machine, before
			// the backend has reached the cut, and stop it there.
			LayerConfig{Layer: layerFor(schema+".stuck", time.Second)})
	}, slog.New(slog.NewTextHandler(logs, nil)))
	base := "http://" + m.Addr()
	owner := testenv.Pool(t)
	defer drained(t, owner, schema)
	for _, layer := range []string{"sleepy", "stuck"} {
		start := time.Now()
		resp, body := fetch(t, http.MethodGet, tileURL(base, layer, maptile.New(0, 0, 0)))
		took := time.Since(start)
		var doc struct{ Type, Detail string }
		err := json.Unmarshal(body, &doc)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != problem.ContentType ||
			resp.Header.Get("Retry-After") == "" || err != nil || doc.Type != problem.TypeBase+string(problem.Timeout) {
			t.Errorf("%s: %d %q Retry-After %q %s; want 503, a timeout problem, Retry-After", layer,
				resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After"), short(body))
		}
		if took >= 4*time.Second {
			t.Errorf("%s: answered after %v, not before the 4 s write timeout", layer, took)
		}
		t.Logf("%s: %d after %v", layer, resp.StatusCode, took.Round(time.Millisecond))
	}
	if n := requestsRunningIn(t, owner, schema); n != 1 {
		t.Errorf("%d statements running after the stuck tile's answer, want the stuck one", n)
	}
	_, metrics := fetch(t, http.MethodGet, base+"/metrics")
	for _, want := range []string{`geotoll_db_calls_total{outcome="statement-timeout"} 2`, "geotoll_db_statements_outliving_answer 1"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The log says so too: PostgreSQL's own cut (SQLSTATE 57014) and the
	// statement that did not stop, each a timeout, neither an unavailable
	// database.
	var failed []string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, `msg="tile failed"`) {
			failed = append(failed, line)
		}
	}
	if len(failed) != 2 || !containsAll(failed[0], []string{"code=timeout", "SQLSTATE 57014", "db_still_running=false"}) ||
		!containsAll(failed[1], []string{"code=timeout", "statement timeout", "db_still_running=true"}) ||
		strings.Contains(logs.String(), "unavailable") {
		t.Errorf("log of the two cut tiles:\n%s\nwant a timeout with SQLSTATE 57014, then a statement timeout still running; never unavailable", logs)
	}
}

// A client that hangs up after 100 ms on a tile whose statement waits for
// a lock: its request is charged what the statement ran until its cancel
// stopped it, and its access log line, written then, says that charge —
// not the X-Request-Cost of its answer (which no one read), written
// while the statement still ran.
func TestEndToEndAccessLogSaysWhatAHungUpRequestWasCharged(t *testing.T) {
	t.Parallel()
	schema, exec := fixtureSchema(t)
	exec(`CREATE TABLE {s}.locked AS SELECT 1::bigint AS id, ST_SetSRID(ST_MakePoint(1, 1), 3857) AS geom`)
	exec(`GRANT SELECT ON {s}.locked TO geotoll_reader`)
	logs := &logBuffer{}
	m := startLogging(t, func(c *Config) {
		stuckPrices(c)
		c.Layers = append(c.Layers, LayerConfig{Layer: layerFor(schema+".locked", 10*time.Second)})
	}, slog.New(slog.NewTextHandler(logs, nil)))
	tx, err := testenv.Pool(t).Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), "LOCK TABLE "+pgx.Identifier{schema, "locked"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	// The client hangs up once the tile's statement has waited for the
	// lock 150 ms (seen in pg_locks: on a loaded machine, a client's
	// own timeout could end the request before its statement began).
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	tile := maptile.At(orb.Point{0.00001, 0.00001}, 14) // priced under a token
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tileURL("http://"+m.Addr(), "locked", tile), nil)
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("the locked tile answered %d", resp.StatusCode)
		} else {
			err = nil
		}
		answered <- err
	}()
	waitForLockWaiter(t, schema)
	time.Sleep(150 * time.Millisecond)
	cancel()
	if err := testenv.Receive(t, answered, "the client's end"); err != nil {
		t.Fatal(err)
	}
	// The lock is held until the server's cancel has stopped the statement
	// (released first, the statement would run on and finish).
	owner := testenv.Pool(t)
	for deadline := time.Now().Add(10 * time.Second); requestsRunningIn(t, owner, schema) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the tile's statement still waits 10 s after its client hung up")
		}
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	// It waited at least the 150 ms before its client hung up (its
	// cancel, which interrupts the lock's wait, comes after): 15 tokens
	// at 10 ms a token; its answer's X-Request-Cost, written while it
	// waited, said 0.02.
	if logged := loggedCost(t, logs, fmt.Sprintf("/tiles/locked/%d/%d/%d.mvt", tile.Z, tile.X, tile.Y)); logged < 10 {
		t.Errorf("the access log says the request whose client hung up cost %v, want at least 10, what it was charged", logged)
	}
}

// waitForLockWaiter waits until a request's statement (the requests'
// pool, not the server's own checks and refreshes) waits for a lock on a
// relation of schema.
func waitForLockWaiter(t *testing.T, schema string) {
	t.Helper()
	owner := testenv.Pool(t)
	deadline := time.Now().Add(10 * time.Second)
	for requestsRunningIn(t, owner, schema) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no request's statement waits for a lock in %s after 10 s", schema)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loggedCost waits for the access log line of a request for path and
// returns the cost it gives.
func loggedCost(t *testing.T, logs *logBuffer, path string) float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for line := range strings.Lines(logs.String()) {
			if !strings.Contains(line, "msg=request ") || !strings.Contains(line, " path="+path+" ") {
				continue
			}
			for f := range strings.FieldsSeq(line) {
				if v, ok := strings.CutPrefix(f, "cost="); ok {
					c, err := strconv.ParseFloat(v, 64)
					if err != nil {
						t.Fatalf("cost %q in %s", v, line)
					}
					return c
				}
			}
			t.Fatalf("no cost in %s", line)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access log line of %s:\n%s", path, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logBuffer is a server log that a test reads while the server writes it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// A key whose tier allows two requests in flight, and whose clients give up
// after 0.3 s and try again at once: however many requests it sends, no
// more than two of its statements ever run, because a request that gave up
// keeps its slot until its statement has stopped.
func TestEndToEndGivenUpRequestsKeepTheirSlots(t *testing.T) {
	schema, exec := fixtureSchema(t)
	stuckView(exec)
	key := createKey(t, "tight")
	base, _ := startServer(t, func(c *Config) {
		stuckPrices(c)
		c.Throttle.Tiers["tight"] = TierConfig{Rate: 1000, Capacity: 10000, MaxInFlight: 2}
		c.Layers = append(c.Layers, LayerConfig{Layer: layerFor(schema+".stuck", 500*time.Millisecond)})
	})
	owner := testenv.Pool(t)
	defer drained(t, owner, schema)

	var peak, seen atomic.Int64
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			n := int64(requestsRunningIn(t, owner, schema))
			seen.Add(n)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
		}
	})

	client := &http.Client{Timeout: 300 * time.Millisecond}
	var sent, refused, gaveUp atomic.Int64
	var clients sync.WaitGroup
	end := time.Now().Add(6 * time.Second)
	for c := range 4 {
		clients.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				// A different tile each time: nothing is cached or shared.
				req, _ := http.NewRequest(http.MethodGet, tileURL(base, "stuck", maptile.New(uint32(c*4000+i)%(1<<14), 0, 14)), nil)
				req.Header.Set("X-API-Key", key)
				sent.Add(1)
				resp, err := client.Do(req)
				if err != nil {
					gaveUp.Add(1)
					continue // gave up after 0.3 s
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Errorf("%s: %d, want 429 or no answer within 0.3 s", req.URL.Path, resp.StatusCode)
					return
				}
				refused.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	clients.Wait()
	drained(t, owner, schema)
	close(stop)
	watch.Wait()
	t.Logf("%d requests sent: %d refused (429), %d given up after 0.3 s; at most %d statements running at once",
		sent.Load(), refused.Load(), gaveUp.Load(), peak.Load())
	if peak.Load() > 2 {
		t.Errorf("%d statements of a key with max_in_flight 2 ran at once", peak.Load())
	}
	if seen.Load() == 0 || refused.Load() == 0 || gaveUp.Load() == 0 {
		t.Errorf("statements seen %d, requests refused %d, given up %d: the test proved nothing", seen.Load(), refused.Load(), gaveUp.Load())
	}
}

// A request whose client gives up while its statement ignores cancellation
// keeps its key's in-flight slot until the PostgreSQL backend has stopped:
// meanwhile every request of the key, even for a cheap tile, is refused
// 429 (in flight); once the backend has stopped, the key is admitted
// again. A tile on Redis, a geofence query on Redis Cluster.
func TestEndToEndSlotHeldUntilTheBackendStops(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster bool
		stuck   string // the path of the request that gives up
	}{
		{"tile on redis", false, "/tiles/stuck/0/0/0.mvt"},
		{"geofence on cluster", true, "/geofence/within?layer=stuck_fence&lng=13.4&lat=52.5&radius=10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema, exec := fixtureSchema(t)
			stuckView(exec)
			exec(`CREATE VIEW {s}.stuck_fence AS
				SELECT 1::bigint AS id, ST_SetSRID(ST_MakePoint(13.4 + z.n * 0, 52.5), 4326) AS geom
				FROM {s}.huge h, LATERAL (SELECT count(*) AS n FROM ST_Subdivide(h.g, 256)) z`)
			exec(`GRANT SELECT ON {s}.stuck_fence TO geotoll_reader`)
			key := createKey(t, "single")
			base, _ := startServer(t, func(c *Config) {
				stuckPrices(c)
				if tc.cluster {
					c.Redis.URL, c.Redis.Addrs, c.Redis.Cluster = "", testenv.RedisClusterAddrs(t), true
				}
				c.Throttle.Tiers["single"] = TierConfig{Rate: 1000, Capacity: 10000, MaxInFlight: 1}
				c.Layers = append(c.Layers, LayerConfig{Layer: layerFor(schema+".stuck", time.Second)})
				c.Geofence.Layers = append(c.Geofence.Layers, geofence.Layer{Name: "stuck_fence",
					Table: schema + ".stuck_fence", GeometryColumn: "geom", StatementTimeout: time.Second})
			})
			owner := testenv.Pool(t)
			defer drained(t, owner, schema)

			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+tc.stuck, nil)
			req.Header.Set("X-API-Key", key)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				t.Fatalf("the stuck request answered %d within 0.3 s", resp.StatusCode)
			}

			cheap := tileURL(base, "places", maptile.At(orb.Point{13.405, 52.52}, 14))
			var refused int
			var stoppedAt time.Time
			limit := time.Now().Add(3 * time.Minute)
			for {
				resp, body := fetch(t, http.MethodGet, cheap, "X-API-Key", key)
				running := requestsRunningIn(t, owner, schema) // after the answer
				if resp.StatusCode != http.StatusTooManyRequests {
					if running > 0 {
						t.Fatalf("a request of the key got %d while its given-up request's statement still runs", resp.StatusCode)
					}
					break
				}
				if !strings.Contains(string(body), "already in flight") {
					t.Fatalf("429 for another reason than the in-flight cap: %s", short(body))
				}
				refused++
				if running == 0 && stoppedAt.IsZero() {
					stoppedAt = time.Now()
				}
				if time.Now().After(limit) {
					t.Fatalf("the key was not admitted within 3 minutes (%d refusals)", refused)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if refused == 0 {
				t.Fatal("the first request after the give-up was admitted: the stuck statement had stopped before it (the test proved nothing)")
			}
			if stoppedAt.IsZero() {
				stoppedAt = time.Now()
			}
			t.Logf("%d requests refused while the backend ran; admitted %v after it was seen stopped", refused,
				time.Since(stoppedAt).Round(time.Millisecond))
		})
	}
}

// A shutdown whose grace runs out closes the connections of the requests
// still running; their handlers return once their statements have been
// cancelled, and settle as they do. Those settlements still reach Redis:
// a replica started after it admits the key at once, its in-flight slot
// free — not refused for the slot's TTL (over a minute) by a slot the
// shutdown left taken.
func TestEndToEndShutdownPastItsGraceFreesTheSlotsItCut(t *testing.T) {
	schema, exec := fixtureSchema(t)
	exec(`CREATE VIEW {s}.sleepy AS SELECT 1::bigint AS id, ST_SetSRID(ST_MakePoint(1, 1), 3857) AS geom FROM (SELECT pg_sleep(30)) z`)
	exec(`GRANT SELECT ON {s}.sleepy TO geotoll_reader`)
	key := createKey(t, "single")
	prefix := testenv.Prefix(t)
	edit := func(c *Config) {
		stuckPrices(c)
		c.Throttle.Prefix = prefix // the second replica's buckets are the first's
		c.HTTP.ShutdownGrace = 200 * time.Millisecond
		c.HTTP.RequestTimeout, c.HTTP.WriteTimeout = 20*time.Second, 25*time.Second
		c.Throttle.TimeoutFloor = 15 * time.Second
		c.Throttle.Tiers["single"] = TierConfig{Rate: 1000, Capacity: 10000, MaxInFlight: 1}
		c.Layers = append(c.Layers, LayerConfig{Layer: layerFor(schema+".sleepy", 15*time.Second)})
	}
	owner := testenv.Pool(t)
	defer drained(t, owner, schema)
	first, stop := launchMain(t, edit, nil)
	defer func() { _ = stop() }()

	answered := make(chan error, 1)
	go func() {
		req, err := http.NewRequest(http.MethodGet, tileURL("http://"+first.Addr(), "sleepy", maptile.New(0, 0, 0)), nil)
		if err == nil {
			req.Header.Set("X-API-Key", key)
			var resp *http.Response
			if resp, err = http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				err = fmt.Errorf("the sleeping tile answered %d", resp.StatusCode)
			}
		}
		answered <- err
	}()
	for deadline := time.Now().Add(time.Minute); requestsRunningIn(t, owner, schema) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the sleeping tile's statement did not start within a minute")
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if err := <-answered; err == nil || strings.Contains(err.Error(), "answered") {
		t.Fatalf("the request cut by the shutdown: %v, want its connection closed", err)
	}
	if n := requestsRunningIn(t, owner, schema); n != 0 {
		t.Fatalf("%d statements still running after the shutdown", n)
	}

	second := startMain(t, edit)
	resp, body := fetch(t, http.MethodGet, tileURL("http://"+second.Addr(), "places", maptile.At(orb.Point{13.405, 52.52}, 14)), "X-API-Key", key)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the key after the shutdown: %d %s, want 200: the slot of the request the shutdown cut is still taken", resp.StatusCode, short(body))
	}
}
