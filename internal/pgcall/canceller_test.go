package pgcall_test

import (
	"errors"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
)

// freezer is a TCP proxy in front of PostgreSQL that can stop passing
// bytes, in both directions and on every connection, new ones included: a
// database that accepts connections and never answers (paused,
// partitioned).
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frozen chan struct{} // closed while the proxy passes bytes
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezer{ln: ln, target: target, frozen: make(chan struct{})}
	close(p.frozen)
	t.Cleanup(func() { ln.Close(); p.thaw() })
	go p.serve()
	return p
}

func (p *freezer) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen
}

func (p *freezer) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = make(chan struct{})
}

func (p *freezer) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.frozen:
	default:
		close(p.frozen)
	}
}

func (p *freezer) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			<-p.gate()
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				return
			}
			go p.pipe(s, c)
			p.pipe(c, s)
		}()
	}
}

// pipe copies src to dst, holding each chunk while the proxy is frozen.
func (p *freezer) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a closed connection
			return
		}
	}
}

// A database that stops answering: the call answers at its cut with 503
// unavailable (its cancel request was never acknowledged, so this is no
// statement timeout), keeps its connection for the configured wait, then
// gives up on it; once the database answers again, so do calls.
func TestUnansweredCancelIsUnavailable(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newFreezer(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	const wait = 1500 * time.Millisecond
	pool := poolAt(t, u.String(), 1, wait)
	obs := &observer{}
	db := &pgcall.DB{Pool: pool, RetryAfter: 5, Calls: obs}
	one := pgcall.Statement{SQL: `SELECT 1`, Timeout: 100 * time.Millisecond}
	if _, err := db.Read(t.Context(), one); err != nil {
		t.Fatalf("Read through the proxy: %v", err)
	}

	proxy.freeze()
	start := time.Now()
	_, err = db.Read(t.Context(), one)
	answered := time.Since(start)
	var stopping *pgcall.Stopping
	p := problem.From(err)
	if !errors.As(err, &stopping) || p.Code != problem.Unavailable || p.RetryAfter != 5 {
		t.Fatalf("Read of a frozen database: %v; want unavailable (Retry-After 5) with the connection still held", err)
	}
	if bound := 100*time.Millisecond + pgcall.AnswerGrace + pgcall.StopWait; answered > bound+time.Second {
		t.Errorf("answered after %v, want about %v", answered, bound)
	}
	if n, outliving := obs.get(pgcall.Unavailable); n != 1 || outliving != 1 {
		t.Errorf("observer: %d unavailable, %d outliving; want 1 and 1", n, outliving)
	}
	if got := pool.Stat().AcquiredConns(); got != 1 {
		t.Errorf("%d connections acquired right after the answer, want 1 (held for the wait)", got)
	}
	done := make(chan struct{})
	go func() { stopping.Wait(); close(done) }()
	select {
	case <-done:
		if held := time.Since(start); held < wait {
			t.Errorf("the connection was given up after %v, before the %v wait", held, wait)
		}
	case <-time.After(wait + 5*time.Second):
		t.Fatalf("the connection was still held %v after the wait of %v", wait+5*time.Second, wait)
	}

	proxy.thaw()
	eventually(t, 10*time.Second, "a Read succeeds once the database answers again", func() bool {
		_, err := db.Read(t.Context(), one)
		return err == nil
	})
}
