package main

import (
	"net"
	"testing"
	"time"
)

// keys, migrate and seed open their pool within database.connect_timeout:
// against a database that accepts TCP and never answers (paused), keys
// list failed after the ping's own 10 s whatever the setting.
func TestAdminPoolOpensWithinConnectTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept, say nothing
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	cfg := DefaultConfig()
	cfg.Database.AdminURL = "postgres://nobody@" + ln.Addr().String() + "/none?sslmode=disable"
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
