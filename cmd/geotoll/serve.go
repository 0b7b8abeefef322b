package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/server"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

// Main is a running geotoll server: Open wires it, Serve runs it until ctx
// ends, Close releases it. End-to-end tests use it as the binary does.
type Main struct {
	Config Config
	Logger *slog.Logger

	Pool    *pgxpool.Pool
	Redis   *redis.Client // nil in single-instance mode
	Handler http.Handler
	Server  *http.Server

	listener net.Listener
}

// Open connects to PostgreSQL and Redis (lazily: a database that is down at
// start-up makes /readyz fail, not the process), builds the handler and
// binds the listen address.
func (m *Main) Open(ctx context.Context) error {
	cfg := m.Config
	if cfg.Database.URL == "" {
		return errors.New("no database: set DATABASE_URL")
	}
	catalog, _, err := cfg.catalog()
	if err != nil {
		return err
	}
	toll, err := cfg.toll()
	if err != nil {
		return err
	}
	toll.Logger = m.Logger

	pcfg, err := pgxpool.ParseConfig(cfg.Database.URL)
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	pcfg.MaxConns = cfg.Database.MaxConns
	pcfg.ConnConfig.RuntimeParams["application_name"] = "geotoll"
	if m.Pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return fmt.Errorf("database: %w", err)
	}

	local := throttle.NewMemoryStore(throttle.MemoryOptions{})
	checks := map[string]server.Check{"postgres": m.Pool.Ping}
	if cfg.Redis.URL == "" {
		m.Logger.Warn("no Redis configured: budgets live in this process (single-instance mode)")
		toll.Store = local
	} else {
		opt, err := redis.ParseURL(cfg.Redis.URL)
		if err != nil {
			return fmt.Errorf("redis url: %w", err)
		}
		// Without ContextTimeoutEnabled go-redis ignores context deadlines
		// on the socket, and the hot-path timeout would not bound anything.
		opt.ContextTimeoutEnabled = true
		m.Redis = redis.NewClient(opt)
		toll.Store = throttle.NewRedisStore(m.Redis)
		toll.Fallback = local
		checks["redis"] = func(ctx context.Context) error { return m.Redis.Ping(ctx).Err() }
	}
	if err := toll.Validate(); err != nil {
		return fmt.Errorf("throttle: %w", err)
	}
	store := tiles.NewStore(m.Pool)
	store.RetryAfter = cfg.Database.RetryAfter
	m.Handler = server.New(server.Options{
		Logger: m.Logger,
		Tiles:  &tiles.Handler{Catalog: catalog, Store: store, Gate: toll, Logger: m.Logger},
		Checks: checks,
	})
	h := cfg.HTTP
	m.Server = &http.Server{
		Handler:           m.Handler,
		ReadHeaderTimeout: h.ReadHeaderTimeout,
		ReadTimeout:       h.ReadTimeout,
		WriteTimeout:      h.WriteTimeout,
		IdleTimeout:       h.IdleTimeout,
		MaxHeaderBytes:    h.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(m.Logger.Handler(), slog.LevelWarn),
	}
	if m.listener, err = net.Listen("tcp", cfg.Listen); err != nil {
		m.Close()
		return err
	}
	return nil
}

// Addr is the bound listen address (useful with port 0).
func (m *Main) Addr() string { return m.listener.Addr().String() }

// Serve serves until ctx ends, then shuts down gracefully: in-flight
// requests get up to ShutdownGrace to finish, new connections are refused.
func (m *Main) Serve(ctx context.Context) error {
	defer m.Close()
	errc := make(chan error, 1)
	go func() { errc <- m.Server.Serve(m.listener) }()
	m.Logger.Info("serving", "addr", m.Addr(), "version", version)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	m.Logger.Info("shutting down", "grace", m.Config.HTTP.ShutdownGrace)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.Config.HTTP.ShutdownGrace)
	defer cancel()
	if err := m.Server.Shutdown(sctx); err != nil {
		m.Logger.Warn("shutdown grace expired; closing", "err", err)
		_ = m.Server.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close releases the connections. It is safe to call more than once.
func (m *Main) Close() {
	if m.Pool != nil {
		m.Pool.Close()
	}
	if m.Redis != nil {
		_ = m.Redis.Close()
		m.Redis = nil
	}
	if m.listener != nil {
		_ = m.listener.Close()
	}
}
