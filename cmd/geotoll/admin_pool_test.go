package main

import (
	"context"
	"net"
	"testing"
	"time"
)

// keys, migrate and seed open their pool within database.connect_timeout:
// against a database that accepts TCP and never answers (paused), keys
// list failed after the ping's own 10 s whatever the setting.
func TestAdminPoolOpensWithinConnectTimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Database.AdminURL = silentDatabase(t)
	cfg.Database.ConnectTimeout = 200 * time.Millisecond
	start := time.Now()
	pool, err := adminPool(t.Context(), cfg)
	if err == nil {
		pool.Close()
		t.Fatal("a pool of a database that never answers")
	}
	// Bounded by the setting (0.2 s), not by the ping's 10 s: half of that
	// leaves a loaded machine room.
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("adminPool failed after %s (%v), want about connect_timeout, 200ms", took.Round(time.Millisecond), err)
	}
}

// silentDatabase is the URL of a database that accepts TCP and never
// answers (paused, or behind a half-open proxy), closed with the test.
func silentDatabase(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // accept, say nothing
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return "postgres://nobody@" + ln.Addr().String() + "/none?sslmode=disable"
}

// The load generator's scenarios open their pools within
// database.connect_timeout too: against a silent database, loadtest
// zooms hung reading the serving storage, with no deadline at all.
func TestScenarioSetupFailsWithinConnectTimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Database.URL = silentDatabase(t)
	cfg.Database.ConnectTimeout = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, pool, err := scenarioSetup(ctx, cfg, "places")
	if err == nil {
		pool.Close()
		t.Fatal("scenarioSetup read the serving storage of a database that never answers")
	}
	if ctx.Err() != nil {
		t.Fatalf("scenarioSetup failed only at the test's own deadline, after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
}
