package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/internal/redact"
	"github.com/geotoll/geotoll/server"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/toll"
)

// enabled reports whether a shared Redis is configured (else budgets live in
// this process).
func (c RedisConfig) enabled() bool { return c.URL != "" || len(c.Addrs) > 0 }

// validateResilience checks the settings that bound failures: Redis and
// PostgreSQL timeouts and the shape of the Redis deployment.
func (c Config) validateResilience() []error {
	var errs []error
	r := c.Redis
	for name, d := range map[string]time.Duration{
		"redis.timeout": r.Timeout, "redis.dial_timeout": r.DialTimeout,
		"redis.probe_interval": r.ProbeInterval, "redis.max_clock_skew": r.MaxClockSkew,
		"database.acquire_timeout": c.Database.AcquireTimeout, "database.connect_timeout": c.Database.ConnectTimeout,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	if c.Database.RetryAfter < 1 {
		errs = append(errs, fmt.Errorf("database.retry_after %d must be at least 1 (seconds): every database 503 says when to retry", c.Database.RetryAfter))
	}
	if !throttle.FailMode(r.FailMode).Valid() {
		errs = append(errs, fmt.Errorf("redis.fail_mode %q must be open, closed or local", r.FailMode))
	}
	if r.LeaseRequests < 0 || r.LeaseRequests > maxLeaseRequests || (r.LeaseRequests > 0 && r.LeaseHold <= 0) {
		errs = append(errs, fmt.Errorf("redis.lease_requests %d and lease_hold %s: requests from 0 to %d (a lease's give-back replays each request it admitted), and a positive hold with leases",
			r.LeaseRequests, r.LeaseHold, maxLeaseRequests))
	}
	if r.PeekReuse < 0 || r.PeekReuse > 10*time.Second {
		errs = append(errs, fmt.Errorf("redis.peek_reuse %s: from 0 (off) to 10s", r.PeekReuse))
	}
	if r.ProbeInterval > 10*time.Second {
		errs = append(errs, fmt.Errorf("redis.probe_interval %s: at most 10s, or a recovered Redis waits that long to be used", r.ProbeInterval))
	}
	switch {
	case r.URL != "" && len(r.Addrs) > 0:
		errs = append(errs, errors.New("redis: set url (one server) or addrs (cluster or sentinel), not both"))
	case r.Cluster && r.MasterName != "":
		errs = append(errs, errors.New("redis: cluster and master_name (sentinel) exclude each other"))
	case (r.Cluster || r.MasterName != "") && len(r.Addrs) == 0:
		errs = append(errs, errors.New("redis: cluster and master_name need addrs"))
	case len(r.Addrs) > 0 && !r.Cluster && r.MasterName == "":
		errs = append(errs, errors.New("redis: addrs name a cluster (cluster: true) or sentinels (master_name); for one server use url"))
	}
	for _, a := range r.Addrs {
		// host:port only: a URL here (redis://u:pw@h:6379) reached the
		// client, whose errors and logs showed it, password and all.
		if _, _, err := net.SplitHostPort(a); err != nil || !forwarded.ValidHost(a) {
			errs = append(errs, fmt.Errorf("redis.addrs entry %q must be host:port (user and password go in redis.username and redis.password)", redact.URL(a)))
		}
	}
	if u, err := url.Parse(r.URL); err == nil && r.URL != "" && u.User != nil {
		if _, set := u.User.Password(); set && r.Password != "" {
			errs = append(errs, errors.New("redis: the password is set twice, in redis.url and in redis.password: keep one"))
		}
		if u.User.Username() != "" && r.Username != "" {
			errs = append(errs, errors.New("redis: the user name is set twice, in redis.url and in redis.username: keep one"))
		}
	}
	return errs
}

// client opens the configured Redis as a UniversalClient: one server
// (url), a Redis Cluster (addrs + cluster) or a Sentinel-managed master
// (addrs + master_name). Budget keys are hash-tagged (and throttle.prefix
// holds no braces): every admit.lua call touches one caller's keys, in one
// slot, so it never sees CROSSSLOT.
//
// Every call is bounded by its context (ContextTimeoutEnabled: without it
// go-redis ignores context deadlines on the socket and the hot-path timeout
// would bound nothing); dials and the pool wait are short, so a dead Redis
// costs little, and go-redis's own retries run within the same deadline.
func (c RedisConfig) client() (redis.UniversalClient, error) {
	poolTimeout := max(c.Timeout, 100*time.Millisecond)
	if c.URL != "" {
		opt, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", redactURLError(err))
		}
		opt.ContextTimeoutEnabled = true
		// What the URL does not set: its credentials (a password kept in
		// a secret's file, GEOTOLL_REDIS_PASSWORD_FILE), its query's
		// timeouts.
		if opt.Username == "" {
			opt.Username = c.Username
		}
		if opt.Password == "" {
			opt.Password = c.Password
		}
		if opt.DialTimeout == 0 {
			opt.DialTimeout = c.DialTimeout
		}
		if opt.PoolTimeout == 0 {
			opt.PoolTimeout = poolTimeout
		}
		if opt.ReadTimeout == 0 {
			opt.ReadTimeout, opt.WriteTimeout = time.Second, time.Second // calls without a deadline
		}
		return redis.NewClient(opt), nil
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: c.Addrs, IsClusterMode: c.Cluster, MasterName: c.MasterName,
		Username: c.Username, Password: c.Password,
		ContextTimeoutEnabled: true,
		DialTimeout:           c.DialTimeout,
		PoolTimeout:           poolTimeout,
		ReadTimeout:           time.Second, // calls without a deadline
		WriteTimeout:          time.Second,
	}), nil
}

// maxLeaseRequests bounds redis.lease_requests: a lease admits up to
// twice as many requests, and its give-back carries a settlement of each
// for Redis to replay.
const maxLeaseRequests = 64

// leases is the RedisStore's LeaseRequests: none (-1) when lease_requests
// is 0. The leases carry tokens: Redis counts them as leased while they
// are out, and no refund or refill by any replica fills a bucket beyond
// its capacity less them, so a lease never admits past the capacity; a
// lease's give-back replays what it admitted at its moments, so the
// bucket's cap meanwhile costs no refill.
func (c RedisConfig) leases() int {
	if c.LeaseRequests <= 0 {
		return -1
	}
	return c.LeaseRequests
}

// storeOptions are the RedisStore's options: token-carrying leases with
// any number of replicas.
func (c RedisConfig) storeOptions() throttle.RedisOptions {
	return throttle.RedisOptions{Timeout: c.Timeout, ClockSkew: c.MaxClockSkew,
		LeaseRequests: c.leases(), LeaseHold: c.LeaseHold}
}

// openRedis makes Redis the toll's budget store — through a Failover, with
// the in-process store as its local fallback — and returns the readiness
// check of it.
func (m *Main) openRedis(t *toll.Toll, local *throttle.MemoryStore) (server.Check, error) {
	c := m.Config.Redis
	rdb, err := c.client()
	if err != nil {
		return nil, err
	}
	m.Redis = rdb
	// go-redis logs on its own (a pool that fails to dial, every second
	// while Redis is down), to stderr as plain text: through the server's
	// logger, its lines are as every other (JSON with log_format json).
	// The logger is go-redis's one, for the whole process.
	redis.SetLogger(redisLog{m.Logger})
	if err := traceRedis(m.Tracing, rdb); err != nil {
		return nil, fmt.Errorf("redis tracing: %w", err)
	}
	m.budgets = throttle.NewRedisStore(rdb, c.storeOptions())
	m.failover = &throttle.Failover{Primary: m.budgets, Local: local, Mode: throttle.FailMode(c.FailMode), Replicas: c.Replicas,
		Timeout: 3 * c.Timeout, ProbeInterval: c.ProbeInterval, PeekReuse: cmp.Or(c.PeekReuse, -1), Logger: m.Logger}
	if err := m.failover.Validate(); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	t.Store = m.failover
	return server.LimiterCheck(m.failover, func(ctx context.Context) error { return probeRedis(ctx, rdb) }), nil
}

// writeProbe is a script that may write and writes nothing: Redis runs it
// only where it would run the budget script — not out of memory
// (maxmemory, noeviction: "OOM command not allowed"), not on a replica
// (READONLY), and not while writes are paused (CLIENT PAUSE WRITE: it waits)
// — where a PING passes. Its shebang (Redis 7) declares it so; a script
// without one is let run out of memory until it writes.
const writeProbe = "#!lua\nreturn 1"

// probeRedis asks one server, or every master of a cluster, whether it
// would take a budget write now (writeProbe), keys untouched.
func probeRedis(ctx context.Context, rdb redis.UniversalClient) error {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Eval(ctx, writeProbe, nil).Err() })
	}
	return rdb.Eval(ctx, writeProbe, nil).Err()
}

// redisLog writes go-redis's log lines as warnings of l.
type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.l.Log(ctx, slog.LevelWarn, strings.TrimSuffix(fmt.Sprintf(format, v...), "\n"), slog.String("component", "redis"))
}
