package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/redact"
)

// DatabaseConfig names the PostGIS connections.
type DatabaseConfig struct {
	// URL is the read connection `serve` uses; it should name the restricted
	// geotoll_reader role (env DATABASE_URL).
	URL string `yaml:"url" secret:"true"`
	// AdminURL is the schema owner `migrate` and `seed` use (env
	// GEOTOLL_ADMIN_DATABASE_URL); empty means URL.
	AdminURL string `yaml:"admin_url" secret:"true"`
	// MaxConns is the read pool's size: how many request statements run at
	// once. The server's own work has a pool of its own (BackgroundConns).
	MaxConns int32 `yaml:"max_conns"`
	// BackgroundConns is the size of the read role's second pool, for the
	// server's own work: price-model builds (at most pricing.Builds at
	// once, and always one connection fewer than this pool holds), the
	// serving registry's refresh, layer checks, API keys. That work never
	// waits for a request's connection, nor a request for it.
	BackgroundConns int32 `yaml:"background_conns"`
	// AnonymousMaxConns is how many of MaxConns the anonymous callers'
	// statements use at once, all of them together (0: no share, the
	// whole pool). Each anonymous address has a bucket of its own; a crawl
	// from many addresses would add them up and leave the keyed callers
	// waiting behind it for connections and database CPU.
	AnonymousMaxConns int32 `yaml:"anonymous_max_conns"`
	// KeyMaxConns is how many of MaxConns one API key's statements use at
	// once (0: no cap), so that no key — with statements that ignore
	// cancellation, say — holds every connection. Off by default: a cap
	// below the pool also caps what one busy key gets from an otherwise
	// idle database.
	KeyMaxConns int32 `yaml:"key_max_conns"`
	// RetryAfter is the Retry-After (seconds) of a 503 from the database.
	RetryAfter int `yaml:"retry_after"`
	// AcquireTimeout bounds the wait for a pooled connection: a database
	// that does not answer (stopped, paused) or a pool whose every
	// connection is busy gives 503 + Retry-After after this, never a hang.
	AcquireTimeout time.Duration `yaml:"acquire_timeout"`
	// ConnectTimeout bounds opening one connection (when the URL has no
	// connect_timeout).
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// CancelWait bounds how long a cancelled statement is waited for: a
	// request whose query is cut (or whose client went away) sends
	// PostgreSQL a cancel request and keeps its connection — and its
	// in-flight slot — until the backend stops, or this long. Only after it
	// is the connection closed on a backend that may still run.
	CancelWait time.Duration `yaml:"cancel_wait"`
}

// keyShare is how many connections one key's statements use at once, 0
// when that is the whole pool (no share).
func (c DatabaseConfig) keyShare() int32 {
	if c.KeyMaxConns >= c.MaxConns {
		return 0
	}
	return max(c.KeyMaxConns, 0)
}

// tunePool bounds how long opening one PostgreSQL connection may take
// (unless the URL says otherwise): a database that accepts TCP but never
// answers (paused) must not hold pool slots for long. And it makes a
// cancelled statement stop with a cancel request while its connection
// waits for it, for at most CancelWait (pgcall.Configure).
func (c DatabaseConfig) tunePool(pcfg *pgxpool.Config) {
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = c.ConnectTimeout
	}
	pgcall.Configure(pcfg, c.CancelWait)
	if pcfg.AfterConnect == nil {
		pcfg.AfterConnect = warmPostGIS
	}
}

// warmSQL calls, once, the PostGIS functions of the tile and geofence
// queries: a backend's first call of them loads PostGIS's catalog entries
// (15-40 ms on 2 cores), which would otherwise be measured as the database
// time of the first request the connection serves, and settled on it.
const warmSQL = `SELECT length(ST_AsMVT(q, 'warm', 4096, 'geom')) FROM (
	SELECT ST_AsMVTGeom(ST_Transform(ST_SetSRID(ST_MakePoint(0, 0), 4326), 3857), ST_TileEnvelope(0, 0, 0), 4096, 64, true) AS geom
	WHERE ST_DWithin(ST_MakePoint(0, 0)::geography, ST_MakePoint(0, 0)::geography, 1)
	  AND ST_Intersects(ST_MakeEnvelope(0, 0, 1, 1, 4326), ST_MakePoint(0.5, 0.5)::geometry)) AS q`

// warmPostGIS runs warmSQL on a new connection, bounded by a second; a
// database without PostGIS just skips it.
func warmPostGIS(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, warmSQL); err != nil && conn.IsClosed() {
		return err // cut short, the connection is gone: the pool connects again
	}
	return nil
}

// validateURLs parses the connection URLs as serve and the other commands
// will, so that `config check` refuses what they would (an error names the
// setting, never the password a URL may hold).
func (c Config) validateURLs() []error {
	var errs []error
	for _, u := range []struct{ name, url string }{
		{"database.url", c.Database.URL},
		{"database.admin_url", c.Database.AdminURL},
		{"geofence.writer_database_url", c.Geofence.WriterDatabaseURL},
	} {
		if u.url == "" || (u.name == "database.admin_url" && u.url == c.Database.URL) { // the default: URL's own
			continue
		}
		if _, err := pgxpool.ParseConfig(u.url); err != nil {
			// pgx hides a password up to its first "@" only.
			errs = append(errs, fmt.Errorf("%s: %s", u.name, redact.URL(err.Error())))
		}
	}
	if c.Redis.URL != "" {
		if _, err := redis.ParseURL(c.Redis.URL); err != nil {
			errs = append(errs, fmt.Errorf("redis.url: %w", redactURLError(err)))
		}
	}
	return errs
}

// validatePoolSize refuses a database.url that sets pool_max_conns, for
// serve: its request and background pools are both opened from that URL
// with the sizes database.max_conns and background_conns, so the URL's
// would be overridden. (The other commands open one pool of the URL's
// size, and take it.)
func (c Config) validatePoolSize() error {
	if setsPoolMaxConns(c.Database.URL) {
		return fmt.Errorf("database.url sets pool_max_conns, which serve does not take: its pools' sizes are database.max_conns (%d) and database.background_conns (%d)",
			c.Database.MaxConns, c.Database.BackgroundConns)
	}
	return nil
}

// setsPoolMaxConns reports whether a connection string, a URL or
// key=value pairs, sets pool_max_conns.
func setsPoolMaxConns(conn string) bool {
	if u, err := url.Parse(conn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		return u.Query().Has("pool_max_conns")
	}
	for _, f := range strings.Fields(conn) {
		if k, _, ok := strings.Cut(f, "="); ok && strings.TrimSpace(k) == "pool_max_conns" {
			return true
		}
	}
	return false
}

// redactURLError is err without the URL a *url.Error quotes whole —
// password included (go-redis returns one for a URL it cannot parse).
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}
