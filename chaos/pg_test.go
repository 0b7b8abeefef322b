package chaos

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// settle lets connections the client dropped close on the server side,
// then reads the goroutine count.
func settle(c *http.Client, g *geotoll) int {
	c.CloseIdleConnections()
	time.Sleep(500 * time.Millisecond)
	return g.goroutines()
}

// PostgreSQL stopped (pause=false: pg_ctl stop -m immediate) or paused
// (pause=true: SIGSTOP on every process, so connections are accepted and
// never answered): requests fail fast with 503 + Retry-After, goroutines
// stay flat, and everything works again once it is back.
func postgresDown(s *sc, pause bool) {
	start := time.Now()
	pg := s.env.pg
	r := startRedis(s.t)
	g := startGeotoll(s.t, s.env.bin, redisConfig(s, r, "closed"))
	rdb := r.client()
	defer rdb.Close()
	c := newClient(8)
	// Every tile here costs 1 token and the bucket holds 1000: each request
	// sent is admitted and charged once, whatever the database then does.
	// The expected charge is what the test sent, not what the server says.
	sent := 0
	for i := 0; i < 5; i++ {
		get(c, g.tile("places"))
		sent++
	}
	baseline := settle(c, g)

	what := "stopped"
	if pause {
		what = "paused"
		pg.pause()
		s.t.Cleanup(pg.resume) // whatever happens, never leave it stopped
	} else {
		pg.stop()
	}
	// 20 requests for tiles nobody cached, 5 at a time.
	var mu sync.Mutex
	var replies []reply
	var wg sync.WaitGroup
	sem := make(chan struct{}, 5)
	peak := 0
	for i := 0; i < 20; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rep := get(c, g.tile("places"))
			mu.Lock()
			replies = append(replies, rep)
			mu.Unlock()
		})
		if i == 10 {
			peak = g.goroutines()
		}
	}
	wg.Wait()
	sent += len(replies)
	good, slowest := 0, time.Duration(0)
	for _, rep := range replies {
		slowest = max(slowest, rep.took)
		if rep.status == 503 && rep.header.Get("Retry-After") != "" && strings.Contains(string(rep.body), "unavailable") {
			good++
		}
	}
	bound := 5 * time.Second // acquire_timeout 1 s; statement_timeout 2 s + 1.5 s for a query in flight (pgcall.AckWait)
	s.check(what+": every request 503 + Retry-After within 5 s, none hangs", good == 20 && slowest < bound,
		"%d/20 × 503 unavailable + Retry-After, slowest %v (e.g. %s)", good, slowest.Round(time.Millisecond), clip(replies[0].String(), 70))
	status, checks, ok := g.readyz(func(status int, checks map[string]string) bool {
		return status == 503 && strings.HasPrefix(checks["postgres"], "down")
	})
	s.check("/readyz 503, postgres down", ok,
		"%d %q", status, clip(checks["postgres"], 60))
	during := settle(c, g)

	if pause {
		pg.resume()
	} else {
		pg.start()
	}
	back := time.Now()
	recovered := waitFor(15*time.Second, func() bool {
		sent++
		return get(c, g.tile("places")).success()
	})
	took := time.Since(back)
	n, _, bad := spend(s, c, g, 10)
	sent += 10
	status, _, ok = g.readyz(func(status int, checks map[string]string) bool { return status == 200 && checks["postgres"] == "ok" })
	s.check("back: requests succeed again, /readyz ok", recovered && n == 10 && ok,
		"first 2xx %v after it returned; then %d/10 2xx %v; readyz %d", took.Round(time.Millisecond), n, bad, status)
	after := 0
	flat := waitFor(10*time.Second, func() bool { after = settle(c, g); return after <= baseline+10 })
	s.check("goroutines flat: back to baseline after the fault", flat && during <= baseline+40,
		"baseline %d, mid-fault %d, after the fault's requests %d, recovered %d", baseline, peak, during, after)
	tok, err := tokens(rdb, clientKey, 1000)
	s.check("bucket = capacity − requests sent (a 503 from the database was admitted: charged once)",
		err == nil && exact(tok, 1000-float64(sent), start), "Redis holds %.4f, %d requests sent", tok, sent)
}

// PostgreSQL down when the server starts, for 16 s: it starts and answers
// (503s), and once the database is back the storage its reads failed on
// at start-up — a polygon layer's pieces, which contains reads, and the
// serving registry — is read within seconds, retried from 1 s on,
// doubling up to 5 s (its tries: 1, 3, 7, 12, 17 s…), not a
// tiles.storage_refresh (30 s) later: contains answered 503 "has not been
// read from the database yet" for half a minute while /readyz said ready
// (and, with the retries doubling up to the refresh interval, 15 s after
// an outage of 16: 1, 3, 7, 15, 31 s).
func postgresDownAtStart(s *sc) {
	pg := s.env.pg
	pg.stop()
	s.t.Cleanup(func() {
		if len(pg.pids()) == 0 {
			pg.start() // whatever happens, the next scenarios get their database
		}
	})
	r := startRedis(s.t)
	cfg := redisConfig(s, r, "local").set("geofence", map[string]any{"layers": []any{map[string]any{
		"name": "districts", "table": "geotoll.districts", "geometry_column": "geom", "id_column": "id",
		"properties": []string{"name"}, "statement_timeout": "2s"}}})
	started := time.Now()
	g := startGeotoll(s.t, s.env.bin, cfg)
	c := newClient(2)
	contains := g.base + "/geofence/contains?layer=districts&lng=13.4&lat=52.5"
	down := get(c, contains)
	s.check("started with postgres down: contains 503 + Retry-After", down.status == 503 && down.header.Get("Retry-After") != "",
		"%s", clip(down.String(), 70))
	time.Sleep(16*time.Second - time.Since(started))
	pg.start()
	back := time.Now()
	var last reply
	ok := waitFor(10*time.Second, func() bool {
		last = get(c, contains)
		if last.status != 200 {
			time.Sleep(150 * time.Millisecond)
		}
		return last.status == 200
	})
	s.check("postgres back after 16 s: contains on a polygon layer answers within 10 s (storage_refresh: 30 s)", ok,
		"%s, %v after it returned", clip(last.String(), 70), time.Since(back).Round(time.Millisecond))
}

// Every pooled connection busy with a slow query: the next requests get 503
// after database.acquire_timeout, never a hang, while /readyz stays 200 (a
// busy database is not a dead one); the pool recovers.
func poolExhausted(s *sc) {
	start := time.Now()
	r := startRedis(s.t)
	g := startGeotoll(s.t, s.env.bin, redisConfig(s, r, "closed").set("database.max_conns", 2))
	rdb := r.client()
	defer rdb.Close()
	c := newClient(10)
	var mu sync.Mutex
	var replies []reply
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Go(func() {
			rep := get(c, g.tile("slow"))
			mu.Lock()
			replies = append(replies, rep)
			mu.Unlock()
		})
	}
	busy := waitSleeping(s)
	readyStatus, readyChecks, _ := g.readyz(func(int, map[string]string) bool { return true }) // one sample
	wg.Wait()
	s.check("/readyz 200 while every pooled connection is busy (its check has a connection of its own)",
		busy && readyStatus == 200 && readyChecks["postgres"] == "ok", "slow query running %v; /readyz %d %q", busy, readyStatus, readyChecks["postgres"])
	served, refused, slowestRefusal, slowest := 0, 0, time.Duration(0), time.Duration(0)
	var other []string
	for _, rep := range replies {
		slowest = max(slowest, rep.took)
		switch {
		case rep.success():
			served++
		case rep.status == 503 && rep.header.Get("Retry-After") != "":
			refused++
			slowestRefusal = max(slowestRefusal, rep.took)
		default:
			other = append(other, clip(rep.String(), 60))
		}
	}
	s.check("8 slow tiles on a pool of 2: the rest 503 + Retry-After after ~1 s acquire timeout",
		served >= 1 && served <= 2 && refused == 8-served && slowestRefusal < 2500*time.Millisecond && slowest < 5*time.Second,
		"%d × 2xx (%v), %d × 503 (slowest %v), other %v", served, slowSleep, refused, slowestRefusal.Round(time.Millisecond), other)
	rep := get(c, g.tile("places"))
	tok, err := tokens(rdb, clientKey, 1000)
	s.check("pool usable afterwards; bucket = capacity − admitted", rep.success() && err == nil && exact(tok, 1000-9, start),
		"next request %d; Redis holds %.4f (want 991)", rep.status, tok)
}

// waitSleeping waits until a backend of pg sleeps in the slow layer.
func waitSleeping(s *sc) bool {
	pg := s.env.pg
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool := pg.pool(ctx, pg.ownerURL)
	defer pool.Close()
	return waitFor(4*time.Second, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'`).Scan(&n)
		return err == nil && n > 0
	})
}

// SIGTERM with a request in flight: it finishes, new connections are
// refused, the process exits within http.shutdown_grace; a request longer
// than the grace is cut off when the grace ends.
func gracefulShutdown(s *sc) {
	for _, tc := range []struct {
		grace    time.Duration
		finishes bool
	}{{5 * time.Second, true}, {time.Second, false}} {
		g := startGeotoll(s.t, s.env.bin, baseConfig(s.env.pg).set("http.shutdown_grace", tc.grace.String()))
		c := newClient(2)
		res := make(chan reply, 1)
		go func() { res <- get(c, g.tile("slow")) }()
		if !waitSleeping(s) {
			s.t.Fatal("the slow request never reached PostgreSQL")
		}
		sigterm := time.Now()
		g.p.signal(syscall.SIGTERM)
		// Dial until the kernel refuses: the listener is closed. (Any other
		// error, e.g. a dial timeout on a loaded machine, is retried.)
		refusedAfter, dialErr := time.Duration(-1), error(nil)
		waitFor(5*time.Second, func() bool {
			conn, err := net.DialTimeout("tcp", g.addr, 2*time.Second)
			if err == nil {
				conn.Close()
				return false
			}
			dialErr = err
			if errors.Is(err, syscall.ECONNREFUSED) {
				refusedAfter = time.Since(sigterm)
				return true
			}
			return false
		})
		var rep reply
		select {
		case rep = <-res:
		case <-time.After(tc.grace + 5*time.Second):
			rep = reply{err: errors.New("no answer")}
		}
		exitedAfter := time.Duration(-1)
		select {
		case <-g.p.done:
			exitedAfter = g.p.at.Sub(sigterm)
		case <-time.After(tc.grace + 5*time.Second):
		}
		exitOK := g.p.exited() && g.p.err == nil
		if tc.finishes {
			s.check("SIGTERM: new connections refused at once", refusedAfter >= 0 && refusedAfter < time.Second,
				"refused %v after SIGTERM (%v)", refusedAfter.Round(10*time.Microsecond), dialErr)
			s.check("the request in flight finishes (200/204)", rep.success(),
				"%s after %v", strings.TrimSpace(clip(rep.String(), 40)), rep.took.Round(100*time.Millisecond))
			s.check("exits 0 within the 5 s grace", exitOK && exitedAfter >= 0 && exitedAfter < tc.grace,
				"exited (%v) %v after SIGTERM", g.p.err, exitedAfter.Round(100*time.Millisecond))
		} else {
			s.check("grace 1 s, request of 2 s: cut off, exits at the grace", !rep.success() && exitOK &&
				exitedAfter >= tc.grace && exitedAfter < tc.grace+2*time.Second,
				"request: %s; exited (%v) %v after SIGTERM", clip(rep.String(), 50), g.p.err, exitedAfter.Round(100*time.Millisecond))
		}
	}
}

// Slow header senders are cut off by ReadHeaderTimeout while normal traffic
// is served; oversized headers get 431, oversized bodies 413.
func httpHardening(s *sc) {
	cfg := baseConfig(s.env.pg).set("http.read_header_timeout", "1s").set("http.max_header_bytes", 8192)
	g := startGeotoll(s.t, s.env.bin, cfg)

	// 20 connections that send a header line every 200 ms, forever.
	var wg sync.WaitGroup
	var mu sync.Mutex
	cut, longest := 0, time.Duration(0)
	for i := 0; i < 20; i++ {
		wg.Go(func() {
			conn, err := net.DialTimeout("tcp", g.addr, time.Second)
			if err != nil {
				return
			}
			defer conn.Close()
			start := time.Now()
			closed := make(chan struct{})
			go func() {
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, _ = io.Copy(io.Discard, conn) // returns when the server closes
				close(closed)
			}()
			_, _ = conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n"))
			for j := 0; j < 40; j++ { // at most 8 s
				select {
				case <-closed:
					mu.Lock()
					cut++
					longest = max(longest, time.Since(start))
					mu.Unlock()
					return
				case <-time.After(200 * time.Millisecond):
				}
				if _, err := conn.Write([]byte("X-Slow: 1\r\n")); err != nil {
					<-closed
					mu.Lock()
					cut++
					longest = max(longest, time.Since(start))
					mu.Unlock()
					return
				}
			}
		})
	}
	// Meanwhile, normal requests.
	c := newClient(4)
	served := 0
	for i := 0; i < 20; i++ {
		if get(c, g.tile("places")).success() {
			served++
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	s.check("20 slow header senders cut off by ReadHeaderTimeout (1 s)", cut == 20 && longest < 3*time.Second,
		"%d/20 closed by the server, the last after %v", cut, longest.Round(100*time.Millisecond))
	s.check("normal traffic served meanwhile", served == 20, "%d/20 2xx", served)

	// Go's server allows max_header_bytes + 4 KiB: 16 KiB is over the
	// configured 8 KiB (+ 4) and under the 32 KiB default, so only a limit
	// that was applied refuses it; 6 KiB passes under either.
	headers := func(n int) reply {
		return do(context.Background(), c, http.MethodGet, g.base+"/healthz", nil, map[string]string{"X-Big": strings.Repeat("a", n)})
	}
	big, fits := headers(16<<10), headers(6<<10)
	s.check("16 KiB of headers (max 8 KiB; the default 32 KiB would pass) → 431; 6 KiB → 200",
		big.status == http.StatusRequestHeaderFieldsTooLarge && fits.status == http.StatusOK,
		"16 KiB: %s; 6 KiB: %s", clip(big.String(), 40), clip(fits.String(), 30))

	body := bytes.NewReader(append(append([]byte(`{"points":`), bytes.Repeat([]byte(" "), 2<<20)...), []byte(`[]}`)...))
	huge := do(context.Background(), c, http.MethodPost, g.base+"/geofence/check", body, map[string]string{"Content-Type": "application/json"})
	s.check("2 MiB body to /geofence/check (max 1 MiB) → 413", huge.status == http.StatusRequestEntityTooLarge, "%s", clip(huge.String(), 70))
}
