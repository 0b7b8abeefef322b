package pgcall_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
)

// A statement that ignores cancellation: the call answers at its cut (a
// 503 statement timeout, not a hang), but its connection stays out of the
// pool — so the pool's only slot stays taken — until the backend has really
// stopped; then it comes back, and the call's database time covers the
// whole run.
func TestStuckStatementKeepsItsConnectionUntilTheBackendStops(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.hugePolygon(t, 150_000)
	pool := readPool(t, 1)
	obs := &observer{}
	db := &pgcall.DB{Pool: pool, RetryAfter: 3, Calls: obs, AcquireTimeout: 200 * time.Millisecond}
	ctx, meter := pgcall.WithMeter(t.Context())

	start := time.Now()
	// A timeout of 1 s, not less: on a loaded machine a shorter one may
	// expire before the backend has even reached the cut (reading the
	// polygon checks for interrupts) and stop it there.
	_, err := db.Read(ctx, pgcall.Statement{SQL: f.stuckSQL(), Timeout: time.Second})
	answered := time.Since(start)
	var stopping *pgcall.Stopping
	if !errors.As(err, &stopping) {
		t.Fatalf("Read of a statement that ignores cancellation: %v after %v; want a pgcall.Stopping "+
			"(if the backend did stop, this machine cut the polygon too fast for the test)", err, answered)
	}
	if p := problem.From(err); p.Code != problem.Timeout || p.RetryAfter != 3 {
		t.Errorf("problem %q Retry-After %d, want %q with 3: the server acknowledged the cancel request, so it is a statement timeout",
			p.Code, p.RetryAfter, problem.Timeout)
	}
	if bound := time.Second + pgcall.AnswerGrace + pgcall.StopWait; answered > bound+time.Second {
		t.Errorf("answered after %v, want about %v (timeout + AnswerGrace + StopWait)", answered, bound)
	}
	if n, outliving := obs.get(pgcall.StatementTimeout); n != 1 || outliving != 1 {
		t.Errorf("observer: %d statement timeouts, %d outliving; want 1 and 1", n, outliving)
	}

	// The backend ignored statement_timeout and the cancel request alike,
	// and its connection is still out of the pool: a second call finds none.
	if n := f.running(t); n != 1 {
		t.Fatalf("%d fixture statements running after the answer, want the stuck one", n)
	}
	if got := pool.Stat().AcquiredConns(); got != 1 {
		t.Errorf("%d connections acquired while the backend runs, want 1", got)
	}
	if _, err := db.Read(t.Context(), pgcall.Statement{SQL: "SELECT 1", Timeout: time.Second}); problem.From(err).Detail != "every database connection is busy; try again later" {
		t.Errorf("second Read while the only connection waits for its backend: %v, want a busy pool", err)
	}

	// Until Wait returns, the backend runs and holds the connection; once
	// it returns, both are over.
	stopped := make(chan struct{})
	go func() { stopping.Wait(); close(stopped) }()
	var lastSeen time.Duration
	limit := time.After(2 * time.Minute)
	for done := false; !done; {
		select {
		case <-stopped:
			done = true
		case <-time.After(50 * time.Millisecond):
			if f.running(t) == 1 {
				lastSeen = time.Since(start)
			}
		case <-limit:
			t.Fatal("the stuck statement did not stop within 2 minutes")
		}
	}
	if n := f.running(t); n != 0 {
		t.Errorf("%d fixture statements running after Wait returned, want 0", n)
	}
	if got := pool.Stat().AcquiredConns(); got != 0 {
		t.Errorf("%d connections acquired after Wait, want 0", got)
	}
	if _, outliving := obs.get(pgcall.StatementTimeout); outliving != 0 {
		t.Errorf("%d statements outliving their answer after Wait, want 0", outliving)
	}
	if lastSeen <= answered {
		t.Errorf("the backend was last seen running %v after the start, not after the answer at %v", lastSeen, answered)
	}
	if m := meter.DB(); m < lastSeen-100*time.Millisecond {
		t.Errorf("metered database time %v, want at least the %v the backend was seen running", m, lastSeen)
	}
	t.Logf("answered after %v; the backend ran for at least %v; metered %v", answered, lastSeen, meter.DB())
}

// Respond sends the whole answer — status, headers, a body with its length
// — before it waits for the statement behind the error, and the handler
// returns only once that statement has stopped.
func TestRespondAnswersThenWaits(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	returned := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(returned)
		err := pgcall.Outlast(&problem.Error{Code: problem.Timeout, Detail: "slow", RetryAfter: 2}, stop)
		pgcall.Respond(w, err, func() { problem.Write(w, r, err) })
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("no answer while the statement runs: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("body: %v", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" ||
		resp.Header.Get("Content-Type") != problem.ContentType || !resp.Close || !strings.Contains(string(body), `"slow"`) {
		t.Errorf("answer %d Retry-After %q %q close=%v %s; want a 503 problem with Retry-After 2 on a closing connection",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), resp.Close, body)
	}
	select {
	case <-returned:
		t.Fatal("the handler returned while the statement still ran")
	case <-time.After(100 * time.Millisecond):
	}
	close(stop)
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not return within 5 s of the statement stopping")
	}
}

// Any other error is written at once, and the handler goes on.
func TestRespondWithoutStatement(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	wrote := false
	pgcall.Respond(w, problem.Malformed("x", "bad"), func() { wrote = true })
	if !wrote || w.Header().Get("Connection") != "" {
		t.Errorf("wrote %v, Connection %q; want written, no Connection header", wrote, w.Header().Get("Connection"))
	}
	pgcall.WaitStopped(errors.New("plain")) // returns at once
}
