package pgcall_test

import (
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
// statement timeout), and the connection is given up at once — waiting on a
// database that answers nothing stops nothing, and must not hold the pool
// (nor a ping, nor an Acquire) for the configured wait. Once the database
// answers again, so do calls.
func TestUnansweredCancelIsUnavailable(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newFreezer(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	pool := poolAt(t, u.String(), 1, time.Minute)
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
	p := problem.From(err)
	if p.Code != problem.Unavailable || p.RetryAfter != 5 {
		t.Fatalf("Read of a frozen database: %v; want unavailable with Retry-After 5", err)
	}
	if bound := 100*time.Millisecond + pgcall.AnswerGrace + pgcall.StopWait; answered > bound+time.Second {
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
