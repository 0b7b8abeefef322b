package loadtest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"
)

// stalledServer listens on loopback, accepts every connection and never
// answers (nor closes one) until the test ends: a server that hangs.
func stalledServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// fakeSteadyPgbench is a stand-in pgbench that reports 6 transactions of
// its 2 clients and writes their logs (-l --log-prefix) as pgbench does,
// so that a steady rate past each client's first one can be read.
func fakeSteadyPgbench(t *testing.T) string {
	t.Helper()
	fake := filepath.Join(t.TempDir(), "pgbench")
	script := `#!/bin/sh
while [ $# -gt 0 ]; do
	if [ "$1" = --log-prefix ]; then prefix=$2; fi
	shift
done
for c in 0 1; do
	printf '%s 1 100 0 1000 0\n%s 2 100 0 1000 100000\n%s 3 100 0 1000 200000\n' $c $c $c
done > "$prefix.1"
echo 'number of transactions actually processed: 6/6'
echo 'tps = 30.0 (without initial connection time)'
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil { //nolint:gosec // G306: a test's stand-in executable
		t.Fatal(err)
	}
	return fake
}

// A ceiling run's warm-up against a server that accepts connections and
// never answers ends at its deadline (CeilingOptions.WarmTimeout) with an
// error of its own, instead of waiting for the server forever.
func TestCeilingWarmUpEndsAtItsDeadline(t *testing.T) {
	base := stalledServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a hang fails the test, not the whole run
	defer cancel()
	o := CeilingOptions{
		Client: &Client{BaseURL: base}, Layer: placesLayer(t),
		Lists: []TileList{{"z14", []maptile.Tile{maptile.At(berlin, 14), maptile.At(berlin, 13)}}},
		Pgbench: Pgbench{Path: fakeSteadyPgbench(t), DatabaseURL: "postgres://127.0.0.1:1/none", Clients: 2, Threads: 1,
			Duration: time.Second, Steady: 1, Dir: t.TempDir()},
		WarmTimeout: time.Second,
	}
	start := time.Now()
	_, err := RunCeiling(ctx, o)
	took := time.Since(start)
	var timeout *WarmUpTimeout
	if !errors.As(err, &timeout) {
		t.Fatalf("RunCeiling against a server that never answers: %v after %s, want a warm-up timeout", err, took)
	}
	if timeout.List != "z14" || timeout.Want != 2 || timeout.Got.OK != 0 || timeout.Timeout != time.Second {
		t.Errorf("warm-up timeout %+v", timeout)
	}
	if took > 10*time.Second {
		t.Errorf("the warm-up, bounded to 1 s, ended after %s", took)
	}
	t.Log(err)
}
