package loadtest

import (
	"io"
	"math"
	"strings"
	"testing"
)

func TestSteadyRate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		logs    []string
		clients int
		skip    int
		want    float64
		err     string
	}{
		// Two clients, one per thread's log. Client 0 finishes at 1.0,
		// 1.1, 1.2, 1.3 s; client 1 at 1.05, 1.15, 1.25, 1.35, 1.45. With
		// the first of each left out, the span is (1.05, 1.3]: 3 of
		// client 0's (1.1, 1.2, 1.3) and 2 of client 1's in 0.25 s.
		{"two threads", []string{
			"0 0 900000 0 1 0\n0 1 1000 0 1 100000\n0 2 1000 0 1 200000\n0 3 1000 0 1 300000\n",
			"1 0 950000 0 1 50000\n1 1 1000 0 1 150000\n1 2 1000 0 1 250000\n1 3 1000 0 1 350000\n1 4 1000 0 1 450000\n",
		}, 2, 1, 5 / 0.25, ""},
		// Lines out of order within a log, and a seventh field (pgbench
		// 15's retries, when --max-tries is not 1), change nothing.
		{"unordered", []string{
			"0 2 1000 0 1 200000 0\n0 0 900000 0 1 0 0\n0 3 1000 0 1 300000 0\n0 1 1000 0 1 100000 0\n",
		}, 1, 2, 2 / 0.2, ""},
		// Seconds carry into microseconds: 9.9 s then 10.1 s.
		{"second boundary", []string{"0 0 1 0 9 900000\n0 1 1 0 10 100000\n0 2 1 0 10 300000\n"}, 1, 1, 2 / 0.4, ""},
		// Uneven completions: 1.0 (skipped), 1.5, 1.6, 1.7 s. The span
		// starts at the skip-th completion (1.0), not the one after it.
		{"uneven", []string{"0 0 1 0 1 0\n0 1 1 0 1 500000\n0 2 1 0 1 600000\n0 3 1 0 1 700000\n"}, 1, 1, 3 / 0.7, ""},
		// A failed transaction (pgbench 15 logs "failed" for its latency)
		// is no completion: without it the span and count are as above.
		{"failed", []string{"0 0 1 0 1 0\n0 1 failed 0 1 200000\n0 2 1 0 1 500000\n0 3 1 0 1 600000\n0 4 1 0 1 700000\n"}, 1, 1, 3 / 0.7, ""},
		{"no lines", []string{""}, 1, 1, 0, "no transactions"},
		// A thread's log that was not read: fewer clients than ran.
		{"a client missing", []string{"0 0 1 0 1 0\n0 1 1 0 2 0\n"}, 2, 1, 0, "1 clients completed transactions, want 2"},
		{"skip zero", []string{"0 0 1 0 1 0\n"}, 1, 0, 0, "at least 1"},
		{"all skipped", []string{"0 0 1 0 1 0\n0 1 1 0 1 1\n"}, 1, 2, 0, "not more than the 2 skipped"},
		// Client 1 ends (2.5 s) before client 0 is past its warm-up (3 s).
		{"no overlap", []string{"0 0 1 0 1 0\n0 1 1 0 3 0\n0 2 1 0 4 0\n", "1 0 1 0 1 0\n1 1 1 0 2 0\n1 2 1 0 2 500000\n"}, 2, 2, 0, "no span"},
		{"short line", []string{"0 0 1 0 1\n"}, 1, 1, 0, "at least 6 fields"},
		{"not a number", []string{"0 0 1 0 x 0\n"}, 1, 1, 0, "not a count"},
		{"negative", []string{"-1 0 1 0 1 0\n"}, 1, 1, 0, "not a count"},
		{"latency neither a count nor a failure", []string{"0 0 1.5 0 1 0\n"}, 1, 1, 0, "latency"},
		{"microseconds out of range", []string{"0 0 1 0 1 1000000\n"}, 1, 1, 0, "out of range"},
		{"seconds beyond a Duration", []string{"0 0 1 0 9223372036 0\n"}, 1, 1, 0, "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rs []io.Reader
			for _, l := range tc.logs {
				rs = append(rs, strings.NewReader(l))
			}
			got, err := steadyRate(rs, tc.clients, tc.skip)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("steadyRate = %v, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || math.Abs(got-tc.want) > 1e-6*tc.want {
				t.Fatalf("steadyRate = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// FuzzSteadyRate: any log gives a positive, finite rate or an error,
// never a panic.
func FuzzSteadyRate(f *testing.F) {
	f.Add("0 0 1 0 1 0\n0 1 1 0 1 500\n0 2 1 0 2 0\n1 0 1 0 1 10\n1 1 1 0 1 600\n1 2 1 0 2 5\n", 2, 1)
	f.Add("", 1, 1)
	f.Add("0 0 1 0 8589934591 999999\n0 1 1 0 8589934591 999999\n0 2 1 0 8589934592 0\n", 1, 1)
	f.Add("0 0 1 0 1 0\n0 1 failed 0 1 5\n0 2 skipped 0 1 6\n0 3 1 0 1 7\n", 1, 1)
	f.Fuzz(func(t *testing.T, log string, clients, skip int) {
		got, err := steadyRate([]io.Reader{strings.NewReader(log)}, clients, skip)
		if err == nil && (got <= 0 || math.IsInf(got, 0) || math.IsNaN(got)) {
			t.Fatalf("steadyRate(%q, %d, %d) = %v, no error", log, clients, skip, got)
		}
	})
}
