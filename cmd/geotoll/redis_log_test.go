package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/toll"
)

// go-redis's own log lines — a pool that fails to dial, every second while
// Redis is down — go through the server's logger: with log_format json,
// every line is JSON. They went to stderr as plain text, and a log parser
// choked on them during an outage.
func TestRedisClientLogsThroughTheServersLogger(t *testing.T) {
	var logs logBuffer
	m := &Main{Config: DefaultConfig(), Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	m.Config.Redis.URL = "redis://127.0.0.1:1/0" // nothing listens there
	if _, err := m.openRedis(&toll.Toll{}, throttle.NewMemoryStore(throttle.MemoryOptions{})); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Redis.Close() }()
	for range 20 {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		_ = m.Redis.Ping(ctx).Err()
		cancel()
		if strings.Contains(logs.String(), `"component":"redis"`) {
			break
		}
	}
	found := false
	for line := range strings.Lines(logs.String()) {
		var rec struct {
			Level, Msg, Component string
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		if rec.Component == "redis" && rec.Level == "WARN" && strings.Contains(rec.Msg, "dial") {
			found = true
		}
	}
	if !found {
		t.Errorf("no go-redis line in the server's log after 20 failed pings:\n%s", logs.String())
	}
}
