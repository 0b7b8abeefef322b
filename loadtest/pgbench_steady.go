package loadtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// steadyRate is the rate of transactions over the span in which every
// one of a pgbench run's clients had finished its first skip transactions
// and none had finished its last, read from the run's per-transaction
// logs (pgbench -l: "client transaction latency_us script epoch_s
// epoch_us", one file per thread). A transaction logged as failed or
// skipped (its latency field says so) is no completion.
//
// pgbench opens its connections afresh each run, and a fresh backend's
// first statements are slow (its first dense z14 tile took about 100 ms
// where its hundredth took 3, on a 2-CPU host): pgbench's own tps counts
// that warm-up, and the tail in which fewer clients are left, so it
// understates what the database serves through warm connections — which
// a server's pool has.
func steadyRate(logs []io.Reader, clients, skip int) (float64, error) {
	if skip < 1 {
		return 0, fmt.Errorf("pgbench log: skip %d must be at least 1", skip)
	}
	ends := map[int][]time.Duration{} // each client's completion times, since the Unix epoch
	for _, r := range logs {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := sc.Text()
			f := strings.Fields(line)
			if len(f) < 6 {
				return 0, fmt.Errorf("pgbench log: %q: want at least 6 fields", line)
			}
			if _, err := strconv.ParseInt(f[2], 10, 64); err != nil {
				switch f[2] {
				case "failed", "skipped", "serialization", "deadlock":
					continue // not a completion
				}
				return 0, fmt.Errorf("pgbench log: %q: latency %q is neither a count nor a failure", line, f[2])
			}
			var v [3]int64
			for i, field := range []string{f[0], f[4], f[5]} {
				n, err := strconv.ParseInt(field, 10, 64)
				if err != nil || n < 0 {
					return 0, fmt.Errorf("pgbench log: %q: field %q is not a count", line, field)
				}
				v[i] = n
			}
			if v[0] > 1<<20 || v[1] > 1<<33 || v[2] >= 1_000_000 { // 2^33 s: within a Duration
				return 0, fmt.Errorf("pgbench log: %q: out of range", line)
			}
			client := int(v[0])
			ends[client] = append(ends[client], time.Duration(v[1])*time.Second+time.Duration(v[2])*time.Microsecond)
		}
		if err := sc.Err(); err != nil {
			return 0, fmt.Errorf("pgbench log: %w", err)
		}
	}
	if len(ends) == 0 {
		return 0, errors.New("pgbench log: no transactions")
	}
	if len(ends) != clients {
		return 0, fmt.Errorf("pgbench log: %d clients completed transactions, want %d", len(ends), clients)
	}
	// from: every client has finished its first skip transactions; to: the
	// first client to finish has.
	var from, to time.Duration
	first := true
	for _, e := range ends {
		slices.Sort(e)
		if len(e) <= skip {
			return 0, fmt.Errorf("pgbench log: a client completed %d transactions, not more than the %d skipped (run longer, or skip fewer)", len(e), skip)
		}
		if start := e[skip-1]; first || start > from {
			from = start
		}
		if first || e[len(e)-1] < to {
			to = e[len(e)-1]
		}
		first = false
	}
	if to <= from {
		return 0, fmt.Errorf("pgbench log: no span in which every client was past its first %d transactions and none had finished", skip)
	}
	n := 0
	for _, e := range ends {
		for _, t := range e {
			if t > from && t <= to {
				n++
			}
		}
	}
	return float64(n) / (to - from).Seconds(), nil
}
