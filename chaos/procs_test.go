package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/geotoll/geotoll/internal/demo"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/migrations"
)

// pgBin is where Debian's PostgreSQL 15 lives (scripts/services.sh installs it).
const pgBin = "/usr/lib/postgresql/15/bin"

// need skips the suite, or fails it when services are required, if a
// program it starts is missing.
func need(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := exec.LookPath(p); err != nil {
			if testenv.Required() {
				t.Fatalf("chaos: %s is missing (%v); scripts/services.sh up installs it", p, err)
			}
			t.Skipf("chaos: %s is missing; run scripts/services.sh up to install it", p)
		}
	}
}

// freePort returns a loopback port nobody listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	return testenv.FreePort(t)
}

// waitFor polls ok every 50 ms until it holds or within passes.
func waitFor(within time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is a child process the suite started; it is signalled only by its
// own pid.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error
	at   time.Time // when it exited
}

func startProc(t testing.TB, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		p.at = time.Now()
		close(p.done)
	}()
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill ends the process (SIGKILL works on a stopped one too) and waits.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// ------------------------------------------------------------------ redis --

// redisServer is a throwaway redis-server: no persistence, loopback only.
type redisServer struct {
	t    testing.TB
	port int
	dir  string
	args []string
	conf string // a sentinel's configuration file; "" for a server
	p    *proc
}

func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	r := &redisServer{t: t, port: freePort(t), dir: t.TempDir(), args: extra}
	r.start()
	t.Cleanup(func() { r.p.kill() })
	return r
}

// start runs redis-server on r.port (again, after kill: a restart).
func (r *redisServer) start() {
	r.t.Helper()
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(r.port),
		"--save", "", "--appendonly", "no", "--dir", r.dir}, r.args...)
	if r.conf != "" {
		args = []string{r.conf, "--sentinel"}
	}
	r.p = startProc(r.t, "redis-server", exec.Command("redis-server", args...))
	c := r.client()
	defer c.Close()
	if !waitFor(10*time.Second, func() bool { return c.Ping(context.Background()).Err() == nil }) {
		r.t.Fatalf("redis-server on %d did not answer:\n%s", r.port, r.p.out.String())
	}
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }
func (r *redisServer) url() string  { return "redis://" + r.addr() + "/0" }

// client is a connection for the test's own inspection.
func (r *redisServer) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: r.addr(), DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second, MaxRetries: -1, ContextTimeoutEnabled: true})
}

func (r *redisServer) kill()   { r.p.kill() }
func (r *redisServer) pause()  { r.p.signal(syscall.SIGSTOP) }
func (r *redisServer) resume() { r.p.signal(syscall.SIGCONT) }

// startSentinel runs a Redis Sentinel watching the master at masterAddr as
// "geotoll", alone (quorum 1), quick to fail over.
func startSentinel(t testing.TB, master *redisServer) *redisServer {
	t.Helper()
	r := &redisServer{t: t, port: freePort(t), dir: t.TempDir()}
	r.conf = filepath.Join(r.dir, "sentinel.conf")
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
		"sentinel monitor geotoll 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds geotoll 1000\n"+
		"sentinel failover-timeout geotoll 10000\n", r.port, r.dir, master.port)
	if err := os.WriteFile(r.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	r.start()
	t.Cleanup(func() { r.p.kill() })
	return r
}

// cluster is a throwaway 3-master Redis Cluster.
type cluster struct {
	nodes []*redisServer
	addrs []string
}

func startCluster(t testing.TB) *cluster {
	t.Helper()
	c := &cluster{}
	for i := 0; i < 3; i++ {
		dir := t.TempDir()
		bus := freePort(t)
		n := startRedis(t, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "2000")
		c.nodes = append(c.nodes, n)
		c.addrs = append(c.addrs, n.addr())
	}
	args := append([]string{"--cluster", "create"}, c.addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ok := waitFor(20*time.Second, func() bool {
		for _, n := range c.nodes {
			cl := n.client()
			info, err := cl.ClusterInfo(context.Background()).Result()
			cl.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatal("the Redis Cluster did not reach cluster_state:ok")
	}
	return c
}

func (c *cluster) client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs, DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second, ContextTimeoutEnabled: true})
}

// ------------------------------------------------------------- postgresql --

// postgres is a throwaway PostgreSQL 15 cluster with PostGIS, migrated and
// seeded with a small demo data set, and a slow layer for the tests that
// need a request in flight.
type postgres struct {
	t       testing.TB
	dir     string
	port    int
	asOwner []string // runuser prefix when the suite runs as root
	// readURL is the geotoll_reader role geotoll serves as; ownerURL the
	// superuser the suite sets up with.
	readURL, ownerURL string
}

// slowSleep is how long a tile of the "slow" layer takes.
const slowSleep = 2 * time.Second

func startPostgres(t *testing.T) *postgres {
	t.Helper()
	need(t, filepath.Join(pgBin, "initdb"), filepath.Join(pgBin, "pg_ctl"))
	dir, err := os.MkdirTemp("/tmp", "geotoll-chaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p := &postgres{t: t, dir: dir, port: freePort(t)}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root: the data dir goes to postgres.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, and there is no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		p.asOwner = []string{"runuser", "-u", "postgres", "--"}
	}
	data := filepath.Join(dir, "data")
	p.run("initdb", filepath.Join(pgBin, "initdb"), "-D", data, "--auth=trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "-N")
	p.start()
	t.Cleanup(func() {
		p.resume()
		p.runQuiet(filepath.Join(pgBin, "pg_ctl"), "stop", "-D", data, "-m", "immediate", "-w", "-t", "20")
	})
	base := fmt.Sprintf("postgres://%%s@127.0.0.1:%d/%%s?sslmode=disable", p.port)
	p.ownerURL = fmt.Sprintf(base, "postgres", "geotoll")
	p.readURL = fmt.Sprintf(base, "geotoll_reader", "geotoll")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := p.pool(ctx, fmt.Sprintf(base, "postgres", "postgres"))
	if _, err := admin.Exec(ctx, "CREATE DATABASE geotoll"); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	owner := p.pool(ctx, p.ownerURL)
	defer owner.Close()
	if _, err := owner.Exec(ctx, "CREATE EXTENSION postgis"); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(ctx, owner); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if err := demo.Load(ctx, owner, demo.Generate(demo.Options{Seed: 1, Points: 20000, Fences: 50})); err != nil {
		t.Fatalf("seed: %v", err)
	}
	// A layer whose every tile takes slowSleep: a request reliably in flight.
	_, err = owner.Exec(ctx, fmt.Sprintf(`
CREATE SCHEMA chaos;
CREATE FUNCTION chaos.slow_places_fn() RETURNS SETOF geotoll.places LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_sleep(%g);
	RETURN QUERY SELECT * FROM geotoll.places;
END $$;
CREATE VIEW chaos.slow_places AS SELECT * FROM chaos.slow_places_fn();
GRANT USAGE ON SCHEMA chaos TO geotoll_reader;
GRANT SELECT ON chaos.slow_places TO geotoll_reader;`, slowSleep.Seconds()))
	if err != nil {
		t.Fatalf("slow layer: %v", err)
	}
	return p
}

func (p *postgres) pool(ctx context.Context, url string) *pgxpool.Pool {
	p.t.Helper()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := pool.Ping(ctx); err != nil {
		p.t.Fatalf("connect %s: %v", url, err)
	}
	return pool
}

func (p *postgres) command(name string, args ...string) *exec.Cmd {
	argv := append(append([]string{}, p.asOwner...), name)
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/" // the postgres user may not enter the test's directory
	return cmd
}

func (p *postgres) run(what, name string, args ...string) {
	p.t.Helper()
	if out, err := p.command(name, args...).CombinedOutput(); err != nil {
		p.t.Fatalf("%s: %v\n%s", what, err, out)
	}
}

func (p *postgres) runQuiet(name string, args ...string) { _ = p.command(name, args...).Run() }

// start starts the cluster (again, after stop).
func (p *postgres) start() {
	p.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "+
		"-c full_page_writes=off -c max_connections=100 -c shared_buffers=32MB", p.port, p.dir)
	p.run("pg_ctl start", filepath.Join(pgBin, "pg_ctl"), "start", "-w", "-t", "30",
		"-D", filepath.Join(p.dir, "data"), "-l", filepath.Join(p.dir, "log"), "-o", opts)
}

// stop stops it the hard way (immediate: no clean shutdown of backends).
func (p *postgres) stop() {
	p.t.Helper()
	p.run("pg_ctl stop", filepath.Join(pgBin, "pg_ctl"), "stop", "-D", filepath.Join(p.dir, "data"), "-m", "immediate", "-w", "-t", "20")
}

// pids are the postmaster's and its children's.
func (p *postgres) pids() []int {
	raw, err := os.ReadFile(filepath.Join(p.dir, "data", "postmaster.pid"))
	if err != nil {
		return nil
	}
	master, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil || master <= 1 {
		return nil
	}
	pids := []int{master}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces, so split after ')'.
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(master) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// pause stops every process of the cluster (the postmaster first, so it
// forks no new backend): connections are accepted by the kernel and never
// answered.
func (p *postgres) pause() {
	for _, pid := range p.pids() {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
}

func (p *postgres) resume() {
	for _, pid := range p.pids() {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
}

// ---------------------------------------------------------------- geotoll --

// buildGeotoll compiles the binary under test.
func buildGeotoll(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("GEOTOLL_CHAOS_BIN"); bin != "" {
		return bin
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // SA1019: only when go is not on PATH; the test binary was built by this GOROOT
	}
	bin := filepath.Join(t.TempDir(), "geotoll")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/geotoll/geotoll/cmd/geotoll")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// geotoll is one running geotoll serve process.
type geotoll struct {
	t    testing.TB
	p    *proc
	base string // http://127.0.0.1:port
	addr string
}

// config is a geotoll YAML configuration as nested maps.
type config map[string]any

// set assigns a dotted path ("redis.fail_mode").
func (c config) set(path string, v any) config {
	keys := strings.Split(path, ".")
	m := map[string]any(c)
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
	return c
}

// baseConfig serves the places layer and the slow layer from pg, with a
// tier whose every tile costs exactly 1 token and which barely refills
// (so token counts are exact: prices by size, with no area term and no
// settlement — throttle.pricing size, a settle floor no request reaches —
// and a statement budget floor above the slow layer's statements, which
// the cost-bound budget would cut at 250 ms, as cheap as they are priced),
// and the default settings otherwise: the
// default Redis timeout (50 ms) and the anonymous tier's default in-flight
// cap (8). A call that times out on a loaded machine is decided by the fail
// mode and never charged twice (its admits are voided in Redis), so the
// counts stay exact: every check counts what Redis decided.
func baseConfig(pg *postgres) config {
	layer := func(name, table string, timeout time.Duration) map[string]any {
		return map[string]any{"name": name, "table": table, "geometry_column": "geom_3857", "srid": 3857,
			"id_column": "id", "properties": []string{"name"}, "max_features": 20000,
			"statement_timeout": timeout.String()}
	}
	return config{
		"log_level": "info", "log_format": "json", "demo_layers": false,
		"database": map[string]any{"url": pg.readURL, "max_conns": 8, "acquire_timeout": "1s", "retry_after": 2},
		"http":     map[string]any{"shutdown_grace": "5s", "read_header_timeout": "2s"},
		"throttle": map[string]any{
			"prefix":  "chaos",
			"tiers":   map[string]any{"anonymous": map[string]any{"rate": rate, "capacity": 1000, "max_in_flight": 8}},
			"weights": map[string]any{"base": 1, "area_weight": 0, "max_cost": 60},
			"pricing": "size", "settle_floor": "1h", "timeout_floor": "10s",
		},
		"layers": []any{layer("places", "geotoll.places", 2*time.Second), layer("slow", "chaos.slow_places", 10*time.Second)},
	}
}

// rate is the refill of the test tiers: 0.001 token/s, so a scenario of a
// minute earns back 0.06 tokens and every count below is exact to that.
const rate = 0.001

// startGeotoll runs `geotoll serve` with cfg and waits until it answers.
func startGeotoll(t testing.TB, bin string, cfg config) *geotoll {
	t.Helper()
	port := freePort(t)
	cfg.set("listen", "127.0.0.1:"+strconv.Itoa(port))
	raw, err := yaml.Marshal(map[string]any(cfg))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "geotoll.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", path, "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()} // no DATABASE_URL, REDIS_URL… from the caller
	g := &geotoll{t: t, addr: "127.0.0.1:" + strconv.Itoa(port)}
	g.base = "http://" + g.addr
	g.p = startProc(t, "geotoll", cmd)
	t.Cleanup(g.stop)
	ok := waitFor(20*time.Second, func() bool {
		if g.p.exited() {
			return false
		}
		resp, err := quick.Get(g.base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if !ok {
		t.Fatalf("geotoll did not start (config %s):\n%s", raw, g.p.out.String())
	}
	return g
}

// stop sends SIGTERM and waits (then SIGKILL).
func (g *geotoll) stop() {
	g.p.signal(syscall.SIGTERM)
	select {
	case <-g.p.done:
	case <-time.After(15 * time.Second):
		g.p.kill()
	}
}

// logCount counts log lines containing s.
func (g *geotoll) logCount(s string) int { return strings.Count(g.p.out.String(), s) }
