package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A duration in a log line reads as in the text format ("1.5s"), in
// either format: JSON wrote nanoseconds ("took":8901501763), which an
// operator reading the log had to count the digits of. Durations nested
// in a group are written the same way.
func TestLoggerWritesDurationsAsText(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			cfg := DefaultConfig()
			cfg.LogFormat = format
			log, err := newLogger(cfg, &buf)
			if err != nil {
				t.Fatal(err)
			}
			log.Info("shutting down", "grace", 15*time.Second, slog.Duration("took", 8901501763*time.Nanosecond),
				slog.Group("build", slog.Duration("took", 250*time.Millisecond)), "count", 3)
			line := buf.String()
			if format == "text" {
				for _, want := range []string{"grace=15s", "took=8.901501763s", "build.took=250ms", "count=3"} {
					if !strings.Contains(line, want) {
						t.Errorf("%q lacks %s", line, want)
					}
				}
				return
			}
			var rec struct {
				Grace, Took string
				Build       struct{ Took string }
				Count       int
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			if rec.Grace != "15s" || rec.Took != "8.901501763s" || rec.Build.Took != "250ms" || rec.Count != 3 {
				t.Errorf("%q: grace %q, took %q, build.took %q, count %d; want 15s, 8.901501763s, 250ms, 3", line, rec.Grace, rec.Took, rec.Build.Took, rec.Count)
			}
		})
	}
}
