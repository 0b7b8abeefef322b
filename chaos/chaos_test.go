package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
)

// scenario is one row group of the table.
type scenario struct {
	name string
	run  func(s *sc)
}

var scenarios = []scenario{
	{"redis killed, fail_mode local", redisKilledLocal},
	{"redis killed, fail_mode local, 4 replicas", redisKilledLocalRate},
	{"redis killed, fail_mode closed", func(s *sc) { redisKilledStrict(s, "closed") }},
	{"redis killed, fail_mode open", func(s *sc) { redisKilledStrict(s, "open") }},
	{"redis paused (SIGSTOP)", redisPaused},
	{"redis slow replies (default timeout)", redisSlowReplies},
	{"redis SCRIPT FLUSH", redisScriptFlush},
	{"redis out of memory", redisOOM},
	{"redis out of memory, fail_mode closed", redisOOMClosed},
	{"cancelled request, redis hung", redisHungCancelled},
	{"redis cluster", redisCluster},
	{"redis sentinel failover", redisSentinel},
	{"two replicas, one budget", twoReplicas},
	{"postgres stopped", func(s *sc) { postgresDown(s, false) }},
	{"postgres paused (SIGSTOP)", func(s *sc) { postgresDown(s, true) }},
	{"postgres down at start-up", postgresDownAtStart},
	{"pool exhausted", poolExhausted},
	{"graceful shutdown", gracefulShutdown},
	{"http hardening", httpHardening},
}

// TestChaos runs every scenario against processes it starts itself and
// prints the table of what was expected and what was observed.
func TestChaos(t *testing.T) {
	if testing.Short() && !testenv.Required() {
		t.Skip("chaos suite: skipped with -short (never in CI)")
	}
	need(t, "redis-server", "redis-cli")
	start := time.Now()
	e := &env{bin: buildGeotoll(t), pg: startPostgres(t)}
	t.Logf("chaos: built geotoll and set up PostgreSQL in %v", time.Since(start).Round(time.Millisecond))
	rep := &report{}
	defer func() {
		fmt.Fprintf(os.Stdout, "\n%s\nchaos: %d checks, %d failed, %v\n", rep.table(), len(rep.rows), rep.failed(),
			time.Since(start).Round(time.Second))
	}()
	for _, sc0 := range scenarios {
		t.Run(strings.NewReplacer(" ", "_", ",", "").Replace(sc0.name), func(t *testing.T) {
			s := &sc{t: t, name: sc0.name, rep: rep, env: e}
			defer func() {
				if t.Failed() && !s.recordedFailure {
					rep.add(row{sc0.name, "scenario runs to the end", "aborted: see the test log", false})
				}
			}()
			sc0.run(s)
		})
	}
}

// env is what every scenario shares: the binary under test and the
// throwaway PostgreSQL (restored by the scenarios that break it).
type env struct {
	bin string
	pg  *postgres
}

// ----------------------------------------------------------------- report --

type row struct {
	scenario, expected, observed string
	pass                         bool
}

type report struct {
	mu   sync.Mutex
	rows []row
}

func (r *report) add(x row) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, x)
}

func (r *report) failed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, x := range r.rows {
		if !x.pass {
			n++
		}
	}
	return n
}

// table renders the rows as a Markdown table, padded to line up.
func (r *report) table() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	head := row{"scenario", "expected", "observed", false}
	cells := func(x row) [4]string {
		res := "PASS"
		if !x.pass {
			res = "FAIL"
		}
		if x == head {
			res = "result"
		}
		return [4]string{x.scenario, x.expected, x.observed, res}
	}
	var w [4]int
	all := append([]row{head}, r.rows...)
	for _, x := range all {
		for i, c := range cells(x) {
			w[i] = max(w[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	line := func(c [4]string) {
		b.WriteString("|")
		for i, s := range c {
			fmt.Fprintf(&b, " %s%s |", s, strings.Repeat(" ", w[i]-len([]rune(s))))
		}
		b.WriteString("\n")
	}
	line(cells(head))
	line([4]string{strings.Repeat("-", w[0]), strings.Repeat("-", w[1]), strings.Repeat("-", w[2]), strings.Repeat("-", w[3])})
	for _, x := range r.rows {
		line(cells(x))
	}
	return b.String()
}

// sc is one running scenario.
type sc struct {
	t               *testing.T
	name            string
	rep             *report
	env             *env
	recordedFailure bool
}

// check records a row; a failing one fails the test too.
func (s *sc) check(expected string, pass bool, observed string, args ...any) bool {
	s.t.Helper()
	obs := fmt.Sprintf(observed, args...)
	s.rep.add(row{s.name, expected, obs, pass})
	if !pass {
		s.recordedFailure = true
		s.t.Errorf("%s: expected %s; observed %s", s.name, expected, obs)
	}
	return pass
}

// ------------------------------------------------------------------- http --

// quick is for readiness polls.
var quick = &http.Client{Timeout: 2 * time.Second}

// newClient keeps up to conns connections to each process.
func newClient(conns int) *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		MaxIdleConns: conns * 2, MaxIdleConnsPerHost: conns, IdleConnTimeout: 30 * time.Second,
	}}
}

type reply struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
	err    error
}

func (r reply) success() bool { return r.status == 200 || r.status == 204 }

func (r reply) String() string {
	if r.err != nil {
		return "error " + r.err.Error()
	}
	b := string(r.body)
	if len(b) > 160 || strings.ContainsRune(b, 0) {
		b = fmt.Sprintf("(%d bytes)", len(r.body))
	}
	return fmt.Sprintf("%d %s", r.status, b)
}

func (r reply) remaining() int {
	n, err := strconv.Atoi(r.header.Get("X-RateLimit-Remaining"))
	if err != nil {
		return -1
	}
	return n
}

func do(ctx context.Context, c *http.Client, method, url string, body io.Reader, hdr map[string]string) reply {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return reply{err: err}
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b, err: err, took: time.Since(start)}
}

func get(c *http.Client, url string) reply {
	return do(context.Background(), c, http.MethodGet, url, nil, nil)
}

// tileSeq makes every tile the suite asks for a different one, so none is a
// cache hit unless a scenario wants it to be.
var tileSeq atomic.Int64

// tile is a new z14 tile of layer (around Berlin, where the demo data is).
func (g *geotoll) tile(layer string) string {
	i := tileSeq.Add(1)
	return fmt.Sprintf("%s/tiles/%s/14/%d/%d.mvt", g.base, layer, 8700+i%200, 5300+i/200)
}

// readyz returns /readyz's status and its details once want holds them,
// or the last ones seen after 5 s. /readyz serves the latest background
// checks (every http.ready_interval, 1 s, each bounded by ready_timeout,
// 2 s): a fault shows there within about 3 s.
func (g *geotoll) readyz(want func(status int, checks map[string]string) bool) (int, map[string]string, bool) {
	var (
		status int
		checks map[string]string
	)
	ok := waitFor(5*time.Second, func() bool {
		r := get(quick, g.base+"/readyz")
		var body struct {
			Checks map[string]string `json:"checks"`
		}
		_ = json.Unmarshal(r.body, &body)
		status, checks = r.status, body.Checks
		return want(status, checks)
	})
	return status, checks, ok
}

// metric sums the samples of a metric whose labels contain every one of
// labels (`name{…} value` lines of /metrics).
func (g *geotoll) metric(name string, labels ...string) float64 {
	r := get(quick, g.base+"/metrics")
	sum := 0.0
	sc := bufio.NewScanner(strings.NewReader(string(r.body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name) || len(l) == len(name) || (l[len(name)] != '{' && l[len(name)] != ' ') {
			continue
		}
		ok := true
		for _, lb := range labels {
			ok = ok && strings.Contains(l, lb)
		}
		if !ok {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// goroutines is the process's goroutine count (the Go collector's gauge).
func (g *geotoll) goroutines() int { return int(g.metric("go_goroutines")) }

// ----------------------------------------------------------------- budget --

// clientKey is the bucket of every request the suite sends: anonymous,
// from 127.0.0.1.
var clientKey = throttle.BucketKey("chaos", "anonymous", "ip:127.0.0.1")

// tokens reads a bucket as Redis holds it; a missing bucket is full. It
// reads once none of the bucket's requests is open, or after quietWait: a
// server's lease of the bucket (redis.lease_requests) is an open request
// whose tokens go back within redis.lease_hold, and the finishes of the
// last requests land within milliseconds.
func tokens(rdb redis.Cmdable, key string, capacity float64) (float64, error) {
	deadline := time.Now().Add(quietWait)
	for {
		v, open, found, err := throttle.Stored(context.Background(), rdb, key)
		if err != nil || !found {
			return capacity, err
		}
		if open == 0 || time.Now().After(deadline) {
			return v, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// quietWait bounds how long tokens waits for a bucket's open requests:
// the default lease hold (500 ms) and a margin.
const quietWait = 1500 * time.Millisecond

// localSpendingCharged reads what g handed to Redis settlements of what
// its callers spent from local buckets (fail_mode local) once Redis
// admitted them again (the buckets here are far above their debt floor,
// so all of it is charged); ok says that is every request it decided
// locally, at 1 token each (the base price of baseConfig, and the refill
// of rate is less than a hundredth over a scenario): each one charged once.
func localSpendingCharged(g *geotoll) (spent float64, ok bool) {
	spent = g.metric("geotoll_limiter_local_spending_carried_tokens_total")
	local := g.metric("geotoll_limiter_fallbacks_total")
	return spent, local > 0 && math.Abs(spent-local) < 0.01
}

// exact reports whether a bucket holding got is what want tokens become
// after at most since of refill at rate: want ≤ got ≤ want + rate·since.
func exact(got, want float64, since time.Time) bool {
	slack := rate*time.Since(since).Seconds() + 1e-6
	return got >= want-1e-6 && got <= want+slack && !math.IsNaN(got)
}
