package pgcall_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
)

// freezer is a TCP proxy in front of PostgreSQL that can stop passing
// bytes, in both directions and on every connection, new ones included: a
// database that accepts connections and never answers (paused,
// partitioned). It can also open new connections late (slowNew): a
// server whose CPUs are all busy, which forks a connection's process
// (a cancel request's too) after its running backends' turns. And it can
// hold the server's bytes alone (holdAnswers), while a connection the
// server closes is still seen closed at once: a backend that answers late,
// after the server acknowledged a cancel request of it.
type freezer struct {
	ln      net.Listener
	target  string
	all     *valve       // every byte, and new connections
	answers *valve       // the server's bytes
	slow    atomic.Int64 // how long a new connection waits before it is passed on
	passed  atomic.Int64 // the connections passed on to the server
}

// slowNew makes every connection opened from now on wait d before the
// proxy passes it on.
func (p *freezer) slowNew(d time.Duration) { p.slow.Store(int64(d)) }

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezer{ln: ln, target: target, all: newValve(), answers: newValve()}
	t.Cleanup(func() { ln.Close(); p.thaw(); p.releaseAnswers() })
	go p.serve()
	return p
}

func (p *freezer) freeze()         { p.all.shut() }
func (p *freezer) thaw()           { p.all.open() }
func (p *freezer) holdAnswers()    { p.answers.shut() }
func (p *freezer) releaseAnswers() { p.answers.open() }

// valve lets through while open: wait's channel is closed then, and
// blocks while shut.
type valve struct {
	mu      sync.Mutex
	passing chan struct{}
}

func newValve() *valve {
	v := &valve{passing: make(chan struct{})}
	close(v.passing)
	return v
}

func (v *valve) wait() chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.passing
}

func (v *valve) shut() {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.passing:
		v.passing = make(chan struct{})
	default: // shut already: its waiters wait on
	}
}

func (v *valve) open() {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.passing:
	default:
		close(v.passing)
	}
}

func (p *freezer) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		slow := time.Duration(p.slow.Load())
		go func() {
			time.Sleep(slow)
			<-p.all.wait()
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				return
			}
			p.passed.Add(1)
			go p.pipe(s, c, nil)
			p.pipe(c, s, p.answers)
		}()
	}
}

// pipe copies src to dst, holding each chunk while the proxy is frozen, and
// while held is shut (the server's direction).
func (p *freezer) pipe(dst, src net.Conn, held *valve) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.all.wait()
			if held != nil {
				<-held.wait()
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a closed connection
			return
		}
	}
}

// A database that stops answering: the call answers AckWait after its cut
// with 503 unavailable (its cancel request was never acknowledged, so this
// is no statement timeout), and the connection is given up at once — waiting on a
// database that answers nothing stops nothing, and must not hold the pool
// (nor a ping, nor an Acquire) for the configured wait. Once the database
// answers again, so do calls.
func TestUnansweredCancelIsUnavailable(t *testing.T) {
	t.Parallel()
	proxy, pool := proxiedPool(t, time.Minute)
	obs := &observer{}
	db := &pgcall.DB{Pool: pool, RetryAfter: 5, Calls: obs}
	one := pgcall.Statement{SQL: `SELECT 1`, Timeout: 100 * time.Millisecond}

	proxy.freeze()
	start := time.Now()
	_, err := db.Read(t.Context(), one)
	answered := time.Since(start)
	p := problem.From(err)
	if p.Code != problem.Unavailable || p.RetryAfter != 5 {
		t.Fatalf("Read of a frozen database: %v; want unavailable with Retry-After 5", err)
	}
	if bound := 100*time.Millisecond + pgcall.AnswerGrace + pgcall.AckWait; answered > bound+time.Second {
		t.Errorf("answered after %v, want about %v", answered, bound)
	}
	if n, _ := obs.get(pgcall.Unavailable); n != 1 {
		t.Errorf("%d calls observed unavailable, want 1", n)
	}
	// The call lets go of its connection (closes it) at once. (pgx then
	// spends up to 15 s trying to say goodbye to the frozen server before
	// the pool counts the slot free.)
	pgcall.WaitStopped(err)
	if held := time.Since(start); held > answered+time.Second {
		t.Errorf("the connection was held %v after the answer, want it given up at once", held-answered)
	}

	proxy.thaw()
	eventually(t, 10*time.Second, "a Read succeeds once the database answers again", func() bool {
		_, err := db.Read(t.Context(), one)
		return err == nil
	})
}

// A live server whose CPUs are all busy acknowledges a cancel request
// late: its postmaster forks the request's process after the running
// backends' turns (BenchmarkCancelAcknowledgement). Its stuck statement
// is a statement timeout, not a database that answers nothing: the
// connection stays out of the pool until the backend stops, as it does
// when the acknowledgement comes at once.
func TestLateCancelAcknowledgementKeepsTheConnection(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.hugePolygon(t, 150_000)
	proxy, pool := proxiedPool(t, testenv.CancelWait)
	db := &pgcall.DB{Pool: pool, RetryAfter: 3, AcquireTimeout: 200 * time.Millisecond}
	// Only the cancel request's connection is late.
	proxy.slowNew(lateAck)

	start := time.Now()
	_, err := db.Read(t.Context(), pgcall.Statement{SQL: f.stuckSQL(), Timeout: time.Second})
	answered := time.Since(start)
	var stopping *pgcall.Stopping
	if !errors.As(err, &stopping) {
		t.Fatalf("Read of a statement that ignores cancellation: %v after %v; want a pgcall.Stopping", err, answered)
	}
	if p := problem.From(err); p.Code != problem.Timeout {
		t.Errorf("problem %q after %v, want %q: the server acknowledged the cancel request %v after it was sent",
			p.Code, answered, problem.Timeout, lateAck)
	}
	heldUntilItStops(t, f, pool, stopping)
}

// lateAck is how late a busy server's acknowledgement of a cancel request
// comes in these tests: past StopWait, within AckWait.
const lateAck = pgcall.StopWait + (pgcall.AckWait-pgcall.StopWait)/2

// proxiedPool is a pool of one connection to the read database through a
// freezer, set up as serve sets up its own; the connection is open.
func proxiedPool(t *testing.T, cancelWait time.Duration) (*freezer, *pgxpool.Pool) {
	t.Helper()
	u, err := url.Parse(testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newFreezer(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	pool := poolAt(t, u.String(), 1, cancelWait)
	if err := pool.Ping(t.Context()); err != nil {
		t.Fatalf("ping through the proxy: %v", err)
	}
	return proxy, pool
}

// heldUntilItStops checks that the stuck fixture statement behind stopping
// runs on with its connection out of pool, and stops before Wait returns.
func heldUntilItStops(t *testing.T, f *fixture, pool *pgxpool.Pool, stopping *pgcall.Stopping) {
	t.Helper()
	if n := f.running(t); n != 1 {
		t.Fatalf("%d fixture statements running after the answer, want the stuck one", n)
	}
	if got := pool.Stat().AcquiredConns(); got != 1 {
		t.Errorf("%d connections acquired while the backend runs, want 1: the connection was given up", got)
	}
	stopping.Wait()
	if n := f.running(t); n != 0 {
		t.Errorf("%d fixture statements running after Wait returned, want 0", n)
	}
}

// A statement that ends while its late cancel request is still on its way
// (here its statement_timeout error, held back as a CPU-starved server
// holds it, released after StopWait and before the acknowledgement): the
// call answers with the statement's own result, not as one still running
// on a server that answers nothing — and answers it then, before the
// cancel request has even reached the server: the request of a call cut
// by its deadline is dropped when the statement ends (which tells nothing
// about the server), never waited for.
func TestStatementEndingBeforeALateAcknowledgementAnswersItsResult(t *testing.T) {
	t.Parallel()
	proxy, pool := proxiedPool(t, time.Minute)
	db := &pgcall.DB{Pool: pool, RetryAfter: 3}
	one := pgcall.Statement{SQL: `SELECT 1`, Timeout: time.Second}
	// Which of the two the call noticed first was a race: run it a few
	// times.
	for i := range 6 {
		if _, err := db.Read(t.Context(), one); err != nil { // (re)opens the pool's connection
			t.Fatalf("Read through the proxy: %v", err)
		}
		proxy.slowNew(900 * time.Millisecond) // the cancel request, acknowledged at about 1.6 s
		held := make(chan struct{})
		go func() {
			defer close(held)
			time.Sleep(100 * time.Millisecond)
			proxy.freeze() // the statement_timeout error (at 200 ms) is held back
			time.Sleep(1100 * time.Millisecond)
			proxy.thaw() // the cut is at 700 ms: released past StopWait, before the acknowledgement
		}()
		passed := proxy.passed.Load()
		_, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT pg_sleep(5)`, Timeout: 200 * time.Millisecond})
		if n := proxy.passed.Load() - passed; n != 0 {
			t.Errorf("run %d: answered after its cancel request reached the server (%d connections passed on): it waited for the acknowledgement", i, n)
		}
		<-held
		// The request reaches the server at about 1.6 s: not during the
		// next run's call.
		for by := time.Now().Add(5 * time.Second); proxy.passed.Load() == passed && time.Now().Before(by); {
			time.Sleep(10 * time.Millisecond)
		}
		proxy.slowNew(0)
		var stopping *pgcall.Stopping
		if errors.As(err, &stopping) || problem.From(err).Code != problem.Timeout {
			t.Fatalf("run %d: %v (still running: %v); want the statement's own timeout", i, err, stopping != nil)
		}
	}
}

// A call cut by its caller's deadline, on a live server that
// acknowledges its cancel request after that deadline: answered at the
// deadline as a statement timeout (the server has not been found
// silent), and the connection kept until the backend stops.
func TestDeadlineBeforeALateAcknowledgementIsATimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.hugePolygon(t, 150_000)
	proxy, pool := proxiedPool(t, testenv.CancelWait)
	db := &pgcall.DB{Pool: pool, RetryAfter: 3}
	proxy.slowNew(lateAck)
	ctx, cancel := context.WithTimeout(t.Context(), 1200*time.Millisecond)
	defer cancel()
	_, err := db.Read(ctx, pgcall.Statement{SQL: f.stuckSQL(), Timeout: 2 * time.Second})
	var stopping *pgcall.Stopping
	if !errors.As(err, &stopping) {
		t.Fatalf("Read of a statement that ignores cancellation: %v; want a pgcall.Stopping", err)
	}
	if p := problem.From(err); p.Code != problem.Timeout {
		t.Errorf("problem %q, want %q: the deadline came before the server's acknowledgement", p.Code, problem.Timeout)
	}
	// Past the acknowledgement, and past AckWait: the connection was not
	// given up (the stuck statement runs for seconds more).
	time.Sleep(pgcall.AckWait)
	heldUntilItStops(t, f, pool, stopping)
}

// A cancel request that went out and was abandoned unacknowledged may
// still reach the server: a busy postmaster reads it late and signals the
// backend, whatever it then runs. The connection is never used again, so
// it cancels nothing else. A caller cut by its deadline abandons its
// request when the statement ends (the answer waits for no
// acknowledgement); one that went away, when no acknowledgement came
// within AckWait.
func TestAbandonedCancelRequestCancelsNothingLater(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		slow time.Duration // how late the cancel request reaches the server
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"the caller's deadline", 600 * time.Millisecond, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(t.Context(), 100*time.Millisecond) // the request goes out at once
		}},
		{"the caller gone", pgcall.AckWait + 300*time.Millisecond, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(100*time.Millisecond, cancel) // the request goes out 50 ms later
			return ctx, cancel
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy, pool := proxiedPool(t, time.Minute)
			proxy.slowNew(tc.slow)
			ctx, cancel := tc.ctx()
			defer cancel()
			_, _ = pool.Exec(ctx, `SELECT pg_sleep(0.4)`) // ends at 400 ms, its cancel request still on its way
			if _, err := pool.Exec(t.Context(), `SELECT pg_sleep(`+strconv.FormatFloat(tc.slow.Seconds()+0.5, 'f', 1, 64)+`)`); err != nil {
				t.Fatalf("the next statement on the pool: %v; want it to run undisturbed", err)
			}
		})
	}
}

// A cancelled call's database time ends when the backend answers. The
// connection is then held a while longer, in case the cancel request is
// still on its way and would cancel its next statement; that wait is no
// work of the database's, and the request is not charged for it. Here the
// server acknowledges the cancel request at once and the backend's answer
// comes 700 ms later, as a backend busy in a function that looks at
// interrupts seldom answers. (Not parallel: it lengthens that wait for
// the connections it makes.)
func TestCancelledCallMetersUntilTheBackendAnswered(t *testing.T) {
	const race = 3 * time.Second
	pgcall.SetRaceDelay(t, race)
	proxy, pool := proxiedPool(t, testenv.CancelWait)
	db := &pgcall.DB{Pool: pool}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ctx, meter := pgcall.WithMeter(ctx)
	time.AfterFunc(300*time.Millisecond, func() {
		proxy.holdAnswers()
		cancel()
		time.AfterFunc(700*time.Millisecond, proxy.releaseAnswers)
	})
	start := time.Now()
	_, err := db.Read(ctx, pgcall.Statement{SQL: `SELECT pg_sleep(10)`, Timeout: 20 * time.Second})
	if p := problem.From(err); p.Detail != "request cancelled" {
		t.Fatalf("Read whose caller left: %v, want \"request cancelled\"", err)
	}
	pgcall.WaitStopped(err)
	if held := time.Since(start); held < race {
		t.Fatalf("the call held its connection %v, less than the %v it waits after an acknowledged cancellation", held, race)
	}
	if got := meter.DB(); got < 900*time.Millisecond || got >= race {
		t.Errorf("metered %v of database time, want the time until the backend answered its cancellation (about 1 s, well under %v)", got, race)
	}
}
