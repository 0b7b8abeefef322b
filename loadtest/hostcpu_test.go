package loadtest

import (
	"errors"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
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
		// This process, whatever its name: Self, not Geotoll.
		"40/stat": {Data: []byte(pidStatLine("40", "geotoll", "6", "4", "500", "500"))},
		// Neither; and a comm holding parentheses and spaces.
		"30/stat": {Data: []byte(pidStatLine("30", "a) (b c", "1000", "1000", "0", "0"))},
		"31/stat": {Data: []byte(pidStatLine("31", "postgres ", "1000", "1000", "0", "0"))},
		// Not a process.
		"self/stat": {Data: []byte("garbage")},
		"sys/stat":  {Data: []byte("garbage")},
	}
	got, err := readCPUUse(proc, "40", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := CPUTimes{
		Self:     (6 + 4) * clockTick,
		Busy:     (100 + 5 + 40 + 3 + 2) * clockTick,
		Steal:    1 * clockTick,
		Switches: 123456,
		Postgres: (20 + 10 + 300 + 40 + 7 + 3) * clockTick,
		Redis:    (4 + 2 + 9 + 9) * clockTick,
		Geotoll:  (70 + 30) * clockTick,
	}
	if d := got.Since(got); !d.PostgresHere {
		t.Errorf("two readings that saw postgres: PostgresHere false")
	}
	if d := got.Since(CPUUse{}); d != want {
		t.Errorf("readCPUUse = %+v, want %+v", d, want)
	}
	later := got
	later.busy, later.postgres, later.switches = got.busy+100, got.postgres+200, got.switches+7
	if d := later.Since(got); d != (CPUTimes{Busy: time.Second, Postgres: 2 * time.Second, Switches: 7, PostgresHere: true}) {
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
			if u, err := readCPUUse(proc, "1", 0); err == nil {
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
		"12/stat": {Data: []byte(pidStatLine("12", "postgres", "3", "0", "0", "0"))}}, "1", 0)
	if err != nil || u.Since(CPUUse{}).Postgres != 3*clockTick {
		t.Errorf("readCPUUse = %+v, %v; want postgres's 3 ticks", u, err)
	}
}

// eventFS is a /proc in which things happen as it is read: after the nth
// read of a file (counting from 1), on(name, n) may change the files.
type eventFS struct {
	fstest.MapFS
	reads    map[string]int
	on       func(f fstest.MapFS, name string, n int) error
	injected int // reads on failed
}

func (f *eventFS) ReadFile(name string) ([]byte, error) {
	if f.reads == nil {
		f.reads = map[string]int{}
	}
	f.reads[name]++
	b, err := f.MapFS.ReadFile(name)
	if err == nil && f.on != nil {
		if e := f.on(f.MapFS, name, f.reads[name]); e != nil {
			f.injected++
			return nil, e
		}
	}
	return b, err
}

// child is a /proc/<pid>/stat line of a process whose parent is ppid.
func child(pid, ppid, comm, utime, stime, cutime, cstime string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte(strings.Replace(pidStatLine(pid, comm, utime, stime, cutime, cstime), " S 1 ", " S "+ppid+" ", 1))}
}

// reapAt is an eventFS's on: right after the nth read of file, backend
// ends and parent (a postmaster of 20+10 ticks) reaps its 50 ticks.
func reapAt(file string, n int, backend, parent string) func(fstest.MapFS, string, int) error {
	return func(f fstest.MapFS, name string, i int) error {
		if name == file && i == n {
			delete(f, backend+"/stat")
			f[parent+"/stat"] = &fstest.MapFile{Data: []byte(pidStatLine(parent, "postgres", "20", "10", "0", "50"))}
		}
		return nil
	}
}

// TestReadCPUUseReap: a backend reaped while the processes are read is
// counted once, whether it was read before its parent (it would count
// twice) or after (it would count not at all), in the first scan or a
// later one; a parent that ends, or a child of Redis's or of geotoll's,
// unsettles nothing; a parent reaping in every scan is an error, not a
// reading.
func TestReadCPUUseReap(t *testing.T) {
	const postgres = (20 + 10 + 50) * clockTick
	backendFirst := func() fstest.MapFS { // "10" is listed before "11"
		return fstest.MapFS{
			"stat":    {Data: []byte("cpu 1 2 3 4 5 6 7 8\nctxt 5\n")},
			"11/stat": {Data: []byte(pidStatLine("11", "postgres", "20", "10", "0", "0"))},
			"10/stat": child("10", "11", "postgres", "30", "20", "0", "0"),
		}
	}
	parentFirst := func() fstest.MapFS {
		return fstest.MapFS{
			"stat":    {Data: []byte("cpu 1 2 3 4 5 6 7 8\nctxt 5\n")},
			"10/stat": {Data: []byte(pidStatLine("10", "postgres", "20", "10", "0", "0"))},
			"11/stat": child("11", "10", "postgres", "30", "20", "0", "0"),
		}
	}
	for _, c := range []struct {
		name     string
		proc     fstest.MapFS
		on       func(f fstest.MapFS, name string, n int) error
		postgres time.Duration
		redis    time.Duration
		err      error
	}{
		{name: "reaped after it was read, before its parent", proc: backendFirst(), postgres: postgres,
			on: reapAt("10/stat", 1, "10", "11")},
		{name: "reaped after its parent was read, before it", proc: parentFirst(), postgres: postgres,
			on: reapAt("10/stat", 1, "11", "10")},
		{name: "a postmaster geotoll started reaps", postgres: postgres,
			proc: fstest.MapFS{
				"stat":    {Data: []byte("cpu 1 2 3 4 5 6 7 8\nctxt 5\n")},
				"5/stat":  {Data: []byte(pidStatLine("5", "geotoll", "1", "1", "0", "0"))},
				"10/stat": child("10", "5", "postgres", "20", "10", "0", "0"),
				"11/stat": child("11", "10", "postgres", "30", "20", "0", "0"),
			},
			on: func(f fstest.MapFS, name string, n int) error {
				if name == "10/stat" && n == 2 { // in the second scan, unless 10 is watched
					delete(f, "11/stat")
					f["10/stat"] = child("10", "5", "postgres", "20", "10", "0", "50")
				}
				return nil
			}},
		{name: "reaped in the second scan", proc: backendFirst(), postgres: postgres,
			on: reapAt("10/stat", 2, "10", "11")},
		{name: "the parent ends after the first scan", proc: backendFirst(), postgres: (30 + 20) * clockTick,
			on: func(f fstest.MapFS, name string, n int) error {
				if name == "11/stat" && n == 1 {
					delete(f, "11/stat")
				}
				return nil
			}},
		{name: "a parent reaps in every scan", proc: parentFirst(), err: errUnsettled,
			on: func(f fstest.MapFS, name string, n int) error {
				if name == "10/stat" {
					f[name] = &fstest.MapFile{Data: []byte(pidStatLine("10", "postgres", "20", "10", "0", strconv.Itoa(n)))}
				}
				return nil
			}},
		// The scan that settles is the second: the fork's second read, its
		// children's time 1 by then.
		{name: "Redis's fork and geotoll reap, and are no parents", redis: (4 + 2 + 9 + 9 + 1 + 1 + 1) * clockTick,
			proc: fstest.MapFS{
				"stat":    {Data: []byte("cpu 1 2 3 4 5 6 7 8\nctxt 5\n")},
				"20/stat": {Data: []byte(pidStatLine("20", "redis-server", "4", "2", "9", "9"))},
				"21/stat": child("21", "20", "redis-server", "1", "1", "0", "0"),
				"25/stat": {Data: []byte(pidStatLine("25", "geotoll", "1", "1", "0", "0"))},
			},
			on: func(f fstest.MapFS, name string, n int) error {
				switch name { // each reads its children's time changed, every time
				case "21/stat":
					f[name] = child("21", "20", "redis-server", "1", "1", strconv.Itoa(n), "0")
				case "25/stat":
					f[name] = &fstest.MapFile{Data: []byte(pidStatLine("25", "geotoll", "1", "1", strconv.Itoa(n), "0"))}
				}
				return nil
			}},
		{name: "a stat it may not read is skipped", proc: parentFirst(), postgres: (20 + 10) * clockTick,
			on: func(f fstest.MapFS, name string, n int) error {
				if name == "11/stat" {
					return &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
				}
				return nil
			}},
		{name: "another error fails the reading", proc: parentFirst(), err: syscall.EIO,
			on: func(f fstest.MapFS, name string, n int) error {
				if name == "11/stat" {
					return &fs.PathError{Op: "read", Path: name, Err: syscall.EIO}
				}
				return nil
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := procText(c.proc)
			f := &eventFS{MapFS: c.proc, on: c.on}
			u, err := readCPUUse(f, "1", 0)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("readCPUUse = %+v, %v; want %v", u, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d := u.Since(CPUUse{})
			if d.Postgres != c.postgres || d.Redis != c.redis {
				t.Errorf("postgres %v, redis %v; want %v, %v", d.Postgres, d.Redis, c.postgres, c.redis)
			}
			// A reap's totals are the same whether it happened or not
			// (20+10 and 30+20 are 20+10+50): the case tests something
			// only if its event changed /proc while it was read (or made
			// a read fail).
			if c.on != nil && f.injected == 0 && procText(c.proc) == before {
				t.Error("the case's event never happened: it tests nothing")
			}
		})
	}
}

// procText is a MapFS's files and contents, in order, for comparing.
func procText(f fstest.MapFS) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(f)) {
		b.WriteString(name + "=" + string(f[name].Data) + "\n")
	}
	return b.String()
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

// TestCPUMeter: a meter StartCPU made answers a run's CPU, this process's
// busy loop in it; one it did not make answers an error rather than
// everything since boot.
func TestCPUMeter(t *testing.T) {
	if _, err := (CPUMeter{}).Stop("identity", 10, 0); !errors.Is(err, errNotStarted) {
		t.Errorf("a zero meter's Stop: %v, want %v", err, errNotStarted)
	}
	if _, err := os.Stat("/proc/stat"); runtime.GOOS != "linux" || err != nil {
		t.Skip("no Linux /proc here")
	}
	m := StartCPU()
	for start := selfCPU(t); selfCPU(t)-start < 50*time.Millisecond; { // busy
	}
	c, err := m.Stop("identity", 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Run != "identity" || c.Tiles != 10 {
		t.Errorf("run %q of %d tiles, want identity of 10", c.Run, c.Tiles)
	}
	if c.Self < 2*clockTick || c.Self > time.Minute {
		t.Errorf("50 ms of this process's CPU, Self %v", c.Self)
	}
	if c.Client() != c.Self {
		t.Errorf("no pgbench: client %v, want Self %v", c.Client(), c.Self)
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
