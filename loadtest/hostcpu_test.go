package loadtest

import (
	"errors"
	"math"
	"os"
	"runtime"
	"testing"
	"testing/fstest"
	"time"
)

// pidStatLine is a /proc/<pid>/stat line of comm with the given CPU ticks
// (utime, stime, cutime, cstime), its other fields as a real one's.
func pidStatLine(pid, comm string, utime, stime, cutime, cstime string) string {
	return pid + " (" + comm + ") S 1 1 1 0 -1 4194560 2400 0 0 0 " +
		utime + " " + stime + " " + cutime + " " + cstime + " 20 0 1 0 100 2000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
}

func TestReadCPUUse(t *testing.T) {
	proc := fstest.MapFS{
		"stat": {Data: []byte("cpu  100 5 40 9000 7 3 2 1 50 0\ncpu0 50 2 20 4500 3 1 1 0 25 0\nintr 1\nctxt 123456\nbtime 1\n")},
		// The postmaster, with the time of its reaped backends.
		"10/stat": {Data: []byte(pidStatLine("10", "postgres", "20", "10", "300", "40"))},
		// A live backend.
		"11/stat": {Data: []byte(pidStatLine("11", "postgres", "7", "3", "0", "0"))},
		// Redis: its own time only.
		"20/stat": {Data: []byte(pidStatLine("20", "redis-server", "4", "2", "9", "9"))},
		// Neither; and a comm holding parentheses and spaces.
		"30/stat": {Data: []byte(pidStatLine("30", "a) (b c", "1000", "1000", "0", "0"))},
		"31/stat": {Data: []byte(pidStatLine("31", "postgres ", "1000", "1000", "0", "0"))},
		// Not a process.
		"self/stat": {Data: []byte("garbage")},
		"sys/stat":  {Data: []byte("garbage")},
	}
	got, err := readCPUUse(proc)
	if err != nil {
		t.Fatal(err)
	}
	want := CPUTimes{
		Busy:     (100 + 5 + 40 + 3 + 2) * clockTick,
		Steal:    1 * clockTick,
		Switches: 123456,
		Postgres: (20 + 10 + 300 + 40 + 7 + 3) * clockTick,
		Redis:    (4 + 2) * clockTick,
	}
	if d := got.Since(CPUUse{}); d != want {
		t.Errorf("readCPUUse = %+v, want %+v", d, want)
	}
	later := CPUUse{busy: got.busy + 100, steal: got.steal, postgres: got.postgres + 200, redis: got.redis, switches: got.switches + 7}
	if d := later.Since(got); d != (CPUTimes{Busy: time.Second, Postgres: 2 * time.Second, Switches: 7}) {
		t.Errorf("Since = %+v", d)
	}
	if d := (CPUUse{busy: 1 << 50}).Since(CPUUse{}); d.Busy != math.MaxInt64/clockTick*clockTick {
		t.Errorf("Since of a span too long for a duration = %v, want it saturated", d.Busy)
	}
}

func TestReadCPUUseMalformed(t *testing.T) {
	good := []byte(pidStatLine("10", "postgres", "1", "1", "1", "1"))
	stat := fstest.MapFile{Data: []byte("cpu 1 2 3 4 5 6 7 8\nctxt 5\n")}
	for name, proc := range map[string]fstest.MapFS{
		"no /proc/stat":      {"10/stat": {Data: good}},
		"no cpu line":        {"stat": {Data: []byte("intr 1 2 3\n")}},
		"short cpu line":     {"stat": {Data: []byte("cpu 1 2 3 4 5 6 7\n")}},
		"negative cpu field": {"stat": {Data: []byte("cpu 1 2 3 4 5 6 7 -8\n")}},
		"huge cpu field":     {"stat": {Data: []byte("cpu 1 2 3 4 5 6 7 99999999999999999\n")}},
		"no ctxt line":       {"stat": {Data: []byte("cpu 1 2 3 4 5 6 7 8\nintr 1\n")}},
		"bad ctxt":           {"stat": {Data: []byte("cpu 1 2 3 4 5 6 7 8\nctxt -5\n")}},
		"no comm":            {"stat": &stat, "10/stat": {Data: []byte("10 postgres S 1")}},
		"short pid stat":     {"stat": &stat, "10/stat": {Data: []byte("10 (postgres) S 1 1 1 0 -1 4 2 0 0 0 5 5\n")}},
		"non-numeric utime":  {"stat": &stat, "10/stat": {Data: []byte(pidStatLine("10", "postgres", "x", "1", "1", "1"))}},
		"negative cutime":    {"stat": &stat, "10/stat": {Data: []byte(pidStatLine("10", "postgres", "1", "1", "-1", "1"))}},
		"overflowing cstime": {"stat": &stat, "10/stat": {Data: []byte(pidStatLine("10", "postgres", "1", "1", "1", "9223372036854775807"))}},
	} {
		t.Run(name, func(t *testing.T) {
			if u, err := readCPUUse(proc); err == nil {
				t.Errorf("readCPUUse = %+v, want an error", u)
			} else if name != "no /proc/stat" && !errors.Is(err, errProcStat) {
				t.Errorf("error %v is not errProcStat", err)
			}
		})
	}
}

// TestReadCPUUseLinux reads this host's /proc: the busy time only grows,
// and this process's own CPU shows in it.
func TestReadCPUUseLinux(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc here")
	}
	before, err := ReadCPUUse()
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); { // busy
	}
	after, err := ReadCPUUse()
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Since(before); d.Busy < 5*clockTick || d.Postgres < 0 || d.Redis < 0 {
		t.Errorf("100 ms of busy loop: %+v", d)
	}
}

func FuzzParsePidStat(f *testing.F) {
	f.Add([]byte(pidStatLine("10", "postgres", "20", "10", "300", "40")))
	f.Add([]byte(pidStatLine("1", ") (", "1", "2", "3", "4")))
	f.Add([]byte("1 (x) S"))
	f.Add([]byte("cpu  100 5 40 9000 7 3 2 1 50 0\nctxt 9\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parsePidStat(b)
		if err == nil && (p.own < 0 || p.children < 0 || p.own > 2*maxTicks || p.children > 2*maxTicks) {
			t.Errorf("parsePidStat(%q) = %+v", b, p)
		}
		busy, steal, switches, err := parseStat(b)
		if err == nil && (busy < 0 || busy > 7*maxTicks || steal < 0 || steal > maxTicks || switches < 0) {
			t.Errorf("parseStat(%q) = %v, %v, %v", b, busy, steal, switches)
		}
	})
}
