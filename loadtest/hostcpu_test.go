package loadtest

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
		// Redis, with its reaped children (a save's fork).
		"20/stat": {Data: []byte(pidStatLine("20", "redis-server", "4", "2", "9", "9"))},
		// geotoll: its own time only (its child is pgbench).
		"25/stat": {Data: []byte(pidStatLine("25", "geotoll", "70", "30", "500", "500"))},
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
		Redis:    (4 + 2 + 9 + 9) * clockTick,
		Geotoll:  (70 + 30) * clockTick,
	}
	if d := got.Since(CPUUse{}); d != want {
		t.Errorf("readCPUUse = %+v, want %+v", d, want)
	}
	later := got
	later.busy, later.postgres, later.switches = got.busy+100, got.postgres+200, got.switches+7
	if d := later.Since(got); d != (CPUTimes{Busy: time.Second, Postgres: 2 * time.Second, Switches: 7}) {
		t.Errorf("Since = %+v", d)
	}
	if d := (CPUUse{busy: 1 << 50}).Since(CPUUse{}); d.Busy != math.MaxInt64/clockTick*clockTick {
		t.Errorf("Since of a span too long for a duration = %v, want it saturated", d.Busy)
	}
}

func TestReadCPUUseMalformed(t *testing.T) {
	stat := fstest.MapFile{Data: []byte("cpu 1 2 3 4 5 6 7 8\nctxt 5\n")}
	for name, proc := range map[string]fstest.MapFS{
		"no /proc/stat":      {"10/stat": {Data: []byte(pidStatLine("10", "postgres", "1", "1", "1", "1"))}},
		"no cpu line":        {"stat": {Data: []byte("intr 1 2 3\nctxt 5\n")}},
		"short cpu line":     {"stat": {Data: []byte("cpu 1 2 3 4 5 6 7\nctxt 5\n")}},
		"negative cpu field": {"stat": {Data: []byte("cpu 1 2 3 4 5 6 7 -8\nctxt 5\n")}},
		"huge cpu field":     {"stat": {Data: []byte("cpu 1 2 3 4 5 6 7 9999999999999999999\nctxt 5\n")}},
		"no ctxt line":       {"stat": {Data: []byte("cpu 1 2 3 4 5 6 7 8\nintr 1\n")}},
		"bad ctxt":           {"stat": {Data: []byte("cpu 1 2 3 4 5 6 7 8\nctxt -5\n")}},
		"short pid stat":     {"stat": &stat, "10/stat": {Data: []byte("10 (postgres) S 1 1 1 0 -1 4 2 0 0 0 5 5\n")}},
		"bad ppid":           {"stat": &stat, "10/stat": {Data: []byte("10 (postgres) S x 1 1 0 -1 4 2 0 0 0 5 5 5 5 5 5\n")}},
		"non-numeric utime":  {"stat": &stat, "10/stat": {Data: []byte(pidStatLine("10", "postgres", "x", "1", "1", "1"))}},
		"negative cutime":    {"stat": &stat, "10/stat": {Data: []byte(pidStatLine("10", "redis-server", "1", "1", "-1", "1"))}},
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
	// A process it does not count is not parsed: however malformed, it
	// fails nothing.
	u, err := readCPUUse(fstest.MapFS{"stat": &stat,
		"10/stat": {Data: []byte("10 bash S 1")},
		"11/stat": {Data: []byte(pidStatLine("11", "bash", "x", "-1", "1", "1"))},
		"12/stat": {Data: []byte(pidStatLine("12", "postgres", "3", "0", "0", "0"))}})
	if err != nil || u.Since(CPUUse{}).Postgres != 3*clockTick {
		t.Errorf("readCPUUse = %+v, %v; want postgres's 3 ticks", u, err)
	}
}

// reapFS is a /proc in which a backend ends, and its parent reaps it,
// right after the file reapOn is first read: its time moves from its own
// stat to its parent's cutime.
type reapFS struct {
	fstest.MapFS
	reapOn, backend, parent string
	reaped                  bool
}

func (f *reapFS) ReadFile(name string) ([]byte, error) {
	b, err := f.MapFS.ReadFile(name)
	if name == f.reapOn && !f.reaped {
		f.reaped = true
		delete(f.MapFS, f.backend+"/stat")
		f.MapFS[f.parent+"/stat"] = &fstest.MapFile{Data: []byte(pidStatLine(f.parent, "postgres", "20", "10", "0", "50"))}
	}
	return b, err
}

// TestReadCPUUseReap: a backend reaped while the processes are read is
// counted once, whether it was read before its parent (it would count
// twice) or after (it would count not at all).
func TestReadCPUUseReap(t *testing.T) {
	for _, c := range []struct{ name, backend, parent string }{
		{"backend read first", "10", "11"},
		{"parent read first", "11", "10"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &reapFS{MapFS: fstest.MapFS{
				"stat":              {Data: []byte("cpu 1 2 3 4 5 6 7 8\nctxt 5\n")},
				c.parent + "/stat":  {Data: []byte(pidStatLine(c.parent, "postgres", "20", "10", "0", "0"))},
				c.backend + "/stat": {Data: []byte(strings.Replace(pidStatLine(c.backend, "postgres", "30", "20", "0", "0"), " S 1 ", " S "+c.parent+" ", 1))},
			}, reapOn: c.backend + "/stat", backend: c.backend, parent: c.parent}
			if c.parent < c.backend { // reap after the parent was read
				f.reapOn = c.parent + "/stat"
			}
			u, err := readCPUUse(f)
			if err != nil {
				t.Fatal(err)
			}
			if !f.reaped {
				t.Fatal("the backend was never reaped: the test reads nothing it means to")
			}
			if got := u.Since(CPUUse{}).Postgres; got != (20+10+50)*clockTick {
				t.Errorf("postgres %v, want %v: the backend's 50 ticks once", got, (20+10+50)*clockTick)
			}
		})
	}
}

// TestReadCPUUseLinux reads this host's /proc: a busy loop of this
// process shows in the host's busy time, and this process's own stat,
// parsed, gives its name and the CPU time getrusage gives it.
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
	for start := selfCPU(t); selfCPU(t)-start < 100*time.Millisecond; { // busy
	}
	after, err := ReadCPUUse()
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Since(before); d.Busy < 5*clockTick {
		t.Errorf("100 ms of this process's CPU, the host's busy time %v", d.Busy)
	}
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	rusage := selfCPU(t)
	p, err := parsePidStat(b)
	if err != nil {
		t.Fatal(err)
	}
	if name := filepath.Base(os.Args[0]); p.comm != name[:min(len(name), 15)] {
		t.Errorf("comm %q, want %q", p.comm, name)
	}
	if own := ticks(p.own); own > rusage+2*clockTick || own < rusage*9/10-5*clockTick {
		t.Errorf("utime+stime %v, getrusage %v", own, rusage)
	}
	if p.ppid != strconv.Itoa(os.Getppid()) {
		t.Errorf("ppid %s, want %d", p.ppid, os.Getppid())
	}
}

// selfCPU is this process's CPU time, user and system, from getrusage.
func selfCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// FuzzProcStat: parsePidStat and parseStat never panic, keep within their
// bounds, and parsePidStat reads fields by position: fields appended to a
// stat it reads change nothing.
func FuzzProcStat(f *testing.F) {
	f.Add([]byte(pidStatLine("10", "postgres", "20", "10", "300", "40")))
	f.Add([]byte(pidStatLine("1", ") (", "1", "2", "3", "4")))
	f.Add([]byte("1 (x) S"))
	f.Add([]byte("cpu  100 5 40 9000 7 3 2 1 50 0\nctxt 9\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parsePidStat(b)
		if err == nil {
			if p.own < 0 || p.children < 0 || p.own > 2*maxTicks || p.children > 2*maxTicks || !isPID(p.ppid) {
				t.Errorf("parsePidStat(%q) = %+v", b, p)
			}
			if q, err := parsePidStat(append(slices.Clip(b), " 7 8\n"...)); err != nil || q != p {
				t.Errorf("parsePidStat with fields appended = %+v, %v; want %+v", q, err, p)
			}
		}
		busy, steal, switches, err := parseStat(b)
		if err == nil && (busy < 0 || busy > 5*maxTicks || steal < 0 || steal > maxTicks || switches < 0) {
			t.Errorf("parseStat(%q) = %v, %v, %v", b, busy, steal, switches)
		}
	})
}

// TestWriteCeilingCPU: each run's CPU a tile, the rest what no process
// counted had; no table when nothing was read.
func TestWriteCeilingCPU(t *testing.T) {
	rs := []CeilingResult{{List: "z14", Tiles: 396, PgbenchTPS: 1000, UnsentTPS: 1200,
		Loops: []LoopResult{{Encoding: "identity", Requests: 2000, OK: 2000, TilesPerSec: 800}},
		CPU: []RunCPU{
			{Run: "pgbench", Tiles: 1000, Pgbench: 200 * time.Millisecond, CPUTimes: CPUTimes{
				Busy: 2 * time.Second, Postgres: 1700 * time.Millisecond, Redis: 10 * time.Millisecond, Switches: 5000}},
			{Run: "identity", Tiles: 2000, CPUTimes: CPUTimes{Busy: 5 * time.Second, Postgres: 3400 * time.Millisecond,
				Redis: 200 * time.Millisecond, Geotoll: 1300 * time.Millisecond, Steal: 20 * time.Millisecond, Switches: 36000}},
		}}}
	var b strings.Builder
	WriteCeiling(&b, "places", 4, 0, time.Second, rs)
	out := b.String()
	for _, row := range [][]string{
		{"z14", "pgbench", "1000", "2000", "1700", "10", "0", "200", "90", "0", "5.0"},
		{"z14", "identity", "2000", "2500", "1700", "100", "650", "0", "50", "10", "18.0"},
	} {
		if !regexp.MustCompile(`(?m)^\s*` + strings.Join(row, `\s+`) + `\s*$`).MatchString(out) {
			t.Errorf("no row %q in:\n%s", row, out)
		}
	}
	rs[0].CPU = nil
	b.Reset()
	WriteCeiling(&b, "places", 4, 0, time.Second, rs)
	if strings.Contains(b.String(), "this host's CPU") {
		t.Errorf("a CPU table with nothing read:\n%s", b.String())
	}
}
