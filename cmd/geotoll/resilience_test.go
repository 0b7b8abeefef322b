package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
)

func loadResilienceYAML(t *testing.T, body string) (Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "geotoll.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := LoadConfig([]string{"-config", path})
	return cfg, err
}

func TestRedisDeployments(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		client     any // the go-redis client type, nil when the config is refused
	}{
		{"one server", `redis: {url: "redis://127.0.0.1:6379/2"}`, &redis.Client{}},
		{"cluster", `redis: {addrs: ["127.0.0.1:7001", "127.0.0.1:7002"], cluster: true}`, &redis.ClusterClient{}},
		{"cluster from one seed", `redis: {addrs: ["127.0.0.1:7001"], cluster: true}`, &redis.ClusterClient{}},
		{"sentinel", `redis: {addrs: ["127.0.0.1:26379"], master_name: mymaster}`, &redis.Client{}},
		{"url and addrs", `redis: {url: "redis://x:1", addrs: ["y:2"], cluster: true}`, nil},
		{"addrs without a kind", `redis: {addrs: ["y:2"]}`, nil},
		{"cluster and sentinel", `redis: {addrs: ["y:2"], cluster: true, master_name: m}`, nil},
		{"cluster without addrs", `redis: {cluster: true}`, nil},
		{"zero probe interval", `redis: {url: "redis://x:1", probe_interval: 0s}`, nil},
		{"slow probe interval", `redis: {url: "redis://x:1", probe_interval: 1m}`, nil},
		{"zero acquire timeout", `database: {acquire_timeout: 0s}`, nil},
		{"budget reads always asked", `redis: {url: "redis://x:1", peek_reuse: 0s}`, &redis.Client{}},
		{"negative peek reuse", `redis: {url: "redis://x:1", peek_reuse: -1s}`, nil},
		{"long peek reuse", `redis: {url: "redis://x:1", peek_reuse: 11s}`, nil},
		{"leases of 64 requests", `redis: {url: "redis://x:1", lease_requests: 64}`, &redis.Client{}},
		{"leases of 65 requests: their replays grow long", `redis: {url: "redis://x:1", lease_requests: 65}`, nil},
		{"a password in the URL and in redis.password", `redis: {url: "redis://:a@x:1", password: b}`, nil},
		{"a user in the URL and in redis.username", `redis: {url: "redis://u@x:1", username: v}`, nil},
		{"a unix socket's password in both", `redis: {url: "unix://:a@/tmp/r.sock", password: b}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := loadResilienceYAML(t, tc.yaml)
			if tc.client == nil {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rdb := redisClientOf(t, cfg.Redis)
			if got, want := typeName(rdb), typeName(tc.client); got != want {
				t.Fatalf("client %s, want %s", got, want)
			}
		})
	}
	// Defaults: a short hot-path timeout, and a short probe interval so a
	// recovered Redis is used again within about a second.
	d := DefaultConfig()
	if d.Redis.Timeout != 50*time.Millisecond || d.Redis.ProbeInterval > time.Second || d.Database.AcquireTimeout != time.Second ||
		d.Redis.PeekReuse != throttle.DefaultPeekReuse {
		t.Fatalf("defaults: %+v %+v", d.Redis, d.Database)
	}
}

// redis.username and redis.password (GEOTOLL_REDIS_PASSWORD_FILE) reach
// a server given by redis.url whose URL carries no credentials: they were
// dropped, config check passed, and serve ran on local buckets (NOAUTH).
func TestRedisURLTakesTheConfiguredCredentials(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, user, password string
	}{
		{"tcp", `redis: {url: "redis://127.0.0.1:6379/2", username: geotoll, password: s3cret}`, "geotoll", "s3cret"},
		{"unix socket", `redis: {url: "unix:///tmp/r.sock", password: s3cret}`, "", "s3cret"},
		{"the URL's own", `redis: {url: "redis://u:p@127.0.0.1:6379"}`, "u", "p"},
		{"the URL's user, the configured password", `redis: {url: "redis://u@127.0.0.1:6379", password: s3cret}`, "u", "s3cret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := loadResilienceYAML(t, tc.yaml)
			if err != nil {
				t.Fatal(err)
			}
			opt := redisClientOf(t, cfg.Redis).(*redis.Client).Options()
			if opt.Username != tc.user || opt.Password != tc.password {
				t.Errorf("user %q, password %q; want %q, %q", opt.Username, opt.Password, tc.user, tc.password)
			}
		})
	}
}

// redisClientOf is the client c opens, closed with the test.
func redisClientOf(t *testing.T, c RedisConfig) redis.UniversalClient {
	t.Helper()
	rdb, err := c.client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func typeName(v any) string {
	switch v.(type) {
	case *redis.Client:
		return "Client"
	case *redis.ClusterClient:
		return "ClusterClient"
	}
	return "other"
}

// serve on the test Redis Cluster: the client bucket and the global budget
// (two hash tags, so two slots) are both charged; the global budget through
// this replica's lease.
func TestEndToEndRedisCluster(t *testing.T) {
	t.Parallel()
	addrs := testenv.RedisClusterAddrs(t)
	rdb := testenv.RedisCluster(t)
	base, cfg := startServer(t, func(c *Config) {
		c.Redis.URL = ""
		c.Redis.Addrs, c.Redis.Cluster = addrs, true
		c.Redis.FailMode = "closed" // a cluster error would be a 503, not a silent fallback
		c.Redis.Timeout = 2 * time.Second
		c.Throttle.Global = BucketConfig{Rate: 0.001, Capacity: 200}
		c.Throttle.Tiers["anonymous"] = TierConfig{Rate: 0.001, Capacity: 80, MaxInFlight: 8} // barely refills
	})
	ctx := context.Background()
	client := throttle.BucketKey(cfg.Throttle.Prefix, "anonymous", "ip:127.0.0.1")
	global := throttle.BucketKey(cfg.Throttle.Prefix, "global", "database")
	t.Cleanup(func() {
		rdb.Del(context.Background(), client, global, throttle.OpenKey(client), throttle.OpenKey(global))
	})
	spent := 0.0
	// Three different tiles: all misses, so each spends the global budget too
	// (a cache hit would not).
	for i, tile := range []string{"10/550/335", "10/551/335", "10/550/336"} {
		resp, body := get(t, base+"/tiles/places/"+tile+".mvt", "")
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, short(body))
		}
		var cost float64
		if err := json.Unmarshal([]byte(resp.Header.Get("X-Request-Cost")), &cost); err != nil {
			t.Fatal(err)
		}
		spent += cost
	}
	// X-Request-Cost is rounded to 1e-3 tokens. The last request's
	// settlement reaches Redis a FinishDelay after its answer (later on a
	// loaded machine): wait for it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		v, _, found, err := throttle.Stored(ctx, rdb, client)
		if err == nil && found && v >= 80-spent-0.002 && v <= 80-spent+0.01 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client bucket holds %v (%v) 5 s after the last answer, want %v", v, err, 80-spent)
		}
	}
	// The global budget is leased by the replica a chunk (a twentieth of
	// its capacity) at a time: it holds its capacity less what was leased.
	if v, _, found, err := throttle.Stored(ctx, rdb, global); err != nil || !found || v > 200-spent+0.01 || v < 200-spent-10 {
		t.Errorf("global budget holds %v (%v), want within a lease of %v", v, err, 200-spent)
	}
	resp, body := get(t, base+"/readyz", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"redis":"ok"`) {
		t.Fatalf("readyz: %d %s", resp.StatusCode, body)
	}
}

// /readyz is unauthenticated: calling it must not make the server check out
// a database connection (or ping Redis) per call, and a pool whose every
// connection is busy is a busy database, not a dead one.
func TestEndToEndReadyzIsNotAProbe(t *testing.T) {
	t.Parallel()
	m := startMain(t, func(c *Config) { c.Database.MaxConns = 2 })
	base := "http://" + m.Addr()
	before := m.Pool.Stat().AcquireCount()
	for i := range 50 {
		if resp, body := get(t, base+"/readyz", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("/readyz %d: %d %s", i, resp.StatusCode, body)
		}
	}
	// Key reloads (other tests create keys) may acquire a few.
	if n := m.Pool.Stat().AcquireCount() - before; n >= 25 {
		t.Fatalf("50 /readyz calls checked out %d pooled connections", n)
	}
	ctx := context.Background()
	for range m.Config.Database.MaxConns { // every connection busy
		conn, err := m.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
	}
	for i := range 3 {
		start := time.Now()
		resp, body := get(t, base+"/readyz", "")
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"postgres":"ok"`) {
			t.Fatalf("/readyz %d with the pool busy (%v): %d %s", i, time.Since(start).Round(time.Millisecond), resp.StatusCode, body)
		}
		time.Sleep(time.Second) // a fresh background round each time (http.ready_interval)
	}
}
