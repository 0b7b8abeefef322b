package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Check reports whether one dependency is ready.
type Check func(ctx context.Context) error

// Defaults of NewReadiness.
const (
	DefaultReadyInterval = time.Second
	DefaultReadyTimeout  = 2 * time.Second
)

// Bounds a configuration holds the interval and timeout to: each round
// pings the dependencies (a database connection, every Redis master), so
// an interval of a nanosecond would ping them as fast as they answer, and
// a round allowed minutes has found its dependency down long before.
const (
	MinReadyInterval = 100 * time.Millisecond
	MaxReadyInterval = time.Minute
	MinReadyTimeout  = 100 * time.Millisecond
	MaxReadyTimeout  = time.Minute
)

// Readiness answers GET /readyz from checks that run in the background,
// every interval, never on behalf of a caller: /readyz is unauthenticated,
// and a probe per call would let anyone make every replica check out a
// database connection and ping every Redis master, as often as they like.
// A caller sees the latest results, at most interval + timeout old.
type Readiness struct {
	checks            map[string]Check
	interval, timeout time.Duration

	mu       sync.Mutex
	last     readyReport
	stopping atomic.Bool // Stopping was called: 503 from now on
}

// Stopping makes /readyz answer 503 ("shutting down") from now on, the
// checks' results aside: the process is draining, and a load balancer
// should send it nothing new.
func (rd *Readiness) Stopping() { rd.stopping.Store(true) }

type readyReport struct {
	at     time.Time
	ready  bool
	checks map[string]string
}

// NewReadiness returns the readiness of checks, run in rounds an interval
// apart (0: DefaultReadyInterval), each bounded by timeout (0:
// DefaultReadyTimeout).
// Nothing runs until Check or Run; until then /readyz is 503.
func NewReadiness(checks map[string]Check, interval, timeout time.Duration) *Readiness {
	if interval <= 0 {
		interval = DefaultReadyInterval
	}
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	return &Readiness{checks: checks, interval: interval, timeout: timeout}
}

// Check runs every check once, concurrently, each bounded by the timeout,
// and keeps the results for /readyz. A check that returns a *DegradedError
// passes with its detail (the dependency is down, but the process serves
// without it), a *ReadyNote passes with its detail, any other error fails.
func (rd *Readiness) Check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, rd.timeout)
	defer cancel()
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		ready  = true
		detail = make(map[string]string, len(rd.checks))
	)
	for name, check := range rd.checks {
		wg.Go(func() {
			d, ok := readyDetail(check(ctx))
			mu.Lock()
			defer mu.Unlock()
			detail[name], ready = d, ready && ok
		})
	}
	wg.Wait()
	rd.mu.Lock()
	rd.last = readyReport{at: time.Now(), ready: ready, checks: detail}
	rd.mu.Unlock()
}

// readyDetail is how /readyz shows one check's result, and whether it
// passes.
func readyDetail(err error) (string, bool) {
	var (
		degraded *DegradedError
		note     *ReadyNote
	)
	switch {
	case err == nil:
		return "ok", true
	case errors.As(err, &degraded):
		return degraded.Error(), true
	case errors.As(err, &note):
		return note.Error(), true
	}
	return "down: " + err.Error(), false
}

// Run checks until ctx ends, starting at once, each round an interval
// after the last one ended: a round slower than the interval (a
// dependency that takes the timeout to answer) is not followed by the
// next at once, and results stay at most interval + timeout old.
func (rd *Readiness) Run(ctx context.Context) {
	t := time.NewTimer(rd.interval)
	defer t.Stop()
	for {
		rd.Check(ctx)
		t.Reset(rd.interval)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ServeHTTP answers /readyz: 200 when the latest checks all passed (or
// there are none), 503 when one failed, when none ran yet, or when the
// latest are older than two intervals and a timeout (the checker has
// stopped).
func (rd *Readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	status, body := rd.report()
	writeReady(w, status, body)
}

// Summary answers /readyz with only whether the process is ready: for a
// listener anyone reaches, where the checks' detail (driver errors, key
// counts) is nobody's business.
func (rd *Readiness) Summary() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		status, _ := rd.report()
		writeReady(w, status, map[string]any{"ready": status == http.StatusOK})
	})
}

func writeReady(w http.ResponseWriter, status int, body map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// report is the status and body of /readyz with detail.
func (rd *Readiness) report() (int, map[string]any) {
	rd.mu.Lock()
	last := rd.last
	rd.mu.Unlock()
	body := map[string]any{"ready": last.ready, "checks": last.checks}
	switch {
	case len(rd.checks) == 0: // nothing to check
		last.ready = true
		body["ready"], body["checks"] = true, map[string]string{}
	case last.at.IsZero():
		last.ready = false
		body["ready"], body["checks"], body["detail"] = false, map[string]string{}, "not checked yet"
	case time.Since(last.at) > 2*rd.interval+rd.timeout:
		last.ready = false
		body["ready"], body["detail"] = false, "the readiness checks have not run since "+last.at.UTC().Format(time.RFC3339)
	}
	if rd.stopping.Load() {
		last.ready = false
		body["ready"], body["detail"] = false, "shutting down"
	}
	if !last.at.IsZero() {
		body["checked_at"] = last.at.UTC().Format(time.RFC3339Nano)
	}
	status := http.StatusOK
	if !last.ready {
		status = http.StatusServiceUnavailable
	}
	return status, body
}

// ConnCheck checks PostgreSQL on a connection of its own, not one of the
// serving pool's: a pool whose every connection is busy serving queries is
// a busy database, not a dead one, and must not make the replica unready
// (a load balancer would pull every replica at once). A connection that
// fails a ping is closed, and the next check opens a new one.
type ConnCheck struct {
	// Connect opens the connection (e.g. with the read pool's settings).
	Connect func(context.Context) (*pgx.Conn, error)

	mu   sync.Mutex
	conn *pgx.Conn
}

// Check implements Check.
func (c *ConnCheck) Check(ctx context.Context) error {
	return c.Do(ctx, func(conn *pgx.Conn) error { return conn.Ping(ctx) })
}

// Do runs fn on the check's connection, opening it if need be, under the
// lock Check takes: another background check that queries the database
// (the layer checks) uses the connection the ping uses, never one of the
// serving pool's. When fn fails the connection is closed, and the next
// call opens a new one.
func (c *ConnCheck) Do(ctx context.Context, fn func(*pgx.Conn) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		conn, err := c.Connect(ctx)
		if err != nil {
			return err
		}
		c.conn = conn
	}
	if err := fn(c.conn); err != nil {
		c.closeLocked(ctx)
		return err
	}
	return nil
}

// Close closes the connection, if one is open.
func (c *ConnCheck) Close(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked(ctx)
}

func (c *ConnCheck) closeLocked(ctx context.Context) {
	if c.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = c.conn.Close(ctx)
	c.conn = nil
}
