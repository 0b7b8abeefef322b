package loadtest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPUUse is the CPU time a Linux host has spent so far, all of it and
// that of the processes of PostgreSQL, of Redis and of geotoll on it, and
// this process's own, from /proc, in /proc's clock ticks. Two readings
// around a run give, by Since, where the host's CPUs went: on a host whose
// CPUs a run keeps busy, a server in front of the database can only serve
// what the CPU time left to the database allows.
type CPUUse struct {
	busy, steal, postgres, redis, geotoll, self, switches int64
	postgresProcs                                         int // processes named postgres seen
}

// CPUTimes is the CPU time spent between two readings of CPUUse. A
// process that ends and whose parent is not counted (a Redis another
// program started, then stopped) takes its time with it, so each figure
// but Busy can fall a little below zero.
type CPUTimes struct {
	// Busy is the time of every CPU outside idle, I/O wait and steal
	// (user, nice, system, irq, softirq).
	Busy time.Duration
	// Steal is the time a virtual machine's CPUs were ready to run and
	// the hypervisor ran something else: time charged to no process here,
	// which slows every one.
	Steal time.Duration
	// Postgres is that of the processes named postgres: the postmaster,
	// every live backend, and the backends that have exited (the
	// postmaster's reaped children) — a pgbench run's connections end
	// with it, and their time would go missing from the live ones alone.
	Postgres time.Duration
	// Redis is that of the processes named redis-server, with their
	// reaped children (a save's fork).
	Redis time.Duration
	// Geotoll is that of the processes named geotoll but this one,
	// without their children: a server run from its binary.
	Geotoll time.Duration
	// Self is this process's own.
	Self time.Duration
	// Switches is the count of context switches of every CPU.
	Switches int64
	// PostgresHere reports whether both readings saw a process named
	// postgres: if not, the database runs elsewhere, and Postgres is
	// none of its time.
	PostgresHere bool
}

// Since is the CPU time spent from earlier to u.
func (u CPUUse) Since(earlier CPUUse) CPUTimes {
	return CPUTimes{Busy: ticks(u.busy - earlier.busy), Steal: ticks(u.steal - earlier.steal),
		Postgres: ticks(u.postgres - earlier.postgres), Redis: ticks(u.redis - earlier.redis),
		Geotoll: ticks(u.geotoll - earlier.geotoll), Self: ticks(u.self - earlier.self),
		Switches: u.switches - earlier.switches, PostgresHere: u.postgresProcs > 0 && earlier.postgresProcs > 0}
}

// clockTick is the unit of /proc's CPU times: USER_HZ, which Linux's ABI
// fixes at 100 a second on the architectures Go builds for.
const clockTick = 10 * time.Millisecond

// ticks is n clock ticks as a duration, saturated at the longest one.
func ticks(n int64) time.Duration {
	const most = math.MaxInt64 / int64(clockTick)
	return time.Duration(min(max(n, -most), most)) * clockTick
}

// maxTicks bounds a CPU time field of /proc: 2^50 ticks, some 350,000
// years of a CPU, beyond any real host's by far. Sums of such fields are
// saturated (add), so that no count of processes overflows them.
const maxTicks = 1 << 50

// add is a + b, both at least zero, saturated at math.MaxInt64.
func add(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// counted are the processes whose CPU time CPUUse keeps, by name (comm):
// what of a process's time counts (add), and whether its reaped children
// count (a parent whose children count is read before and after a scan:
// see readCPUUse).
var counted = map[string]struct {
	add      func(u *CPUUse, p pidStat)
	children bool
}{
	"postgres": {func(u *CPUUse, p pidStat) {
		u.postgres = add(u.postgres, add(p.own, p.children))
		u.postgresProcs++
	}, true},
	"redis-server": {func(u *CPUUse, p pidStat) { u.redis = add(u.redis, add(p.own, p.children)) }, true},
	// geotoll's child is pgbench (`geotoll loadtest`), timed on its own.
	"geotoll": {func(u *CPUUse, p pidStat) { u.geotoll = add(u.geotoll, p.own) }, false},
}

// ReadCPUUse reads the host's CPU use so far from /proc, of the processes
// this one can see there (with /proc mounted hidepid, its own user's).
func ReadCPUUse() (CPUUse, error) {
	return readCPUUse(os.DirFS("/proc"), strconv.Itoa(os.Getpid()), 5*time.Millisecond)
}

// readTries bounds how many times readCPUUse reads the processes.
const readTries = 10

// errUnsettled is readCPUUse's error when processes were reaped during
// every one of its readTries scans.
var errUnsettled = errors.New("processes were reaped during every scan of /proc")

// readCPUUse reads proc, a file system laid out as Linux's /proc, in which
// this process is self (a pid).
//
// A process's time is its own and that of its children it has reaped, so
// a process that ends and is reaped while the processes are read is
// counted twice (read live, then in its parent's) or not at all (the other
// way round): a pgbench run's backends end together. So the parents — the
// counted processes whose children count and whose parent is not one of
// the same name: the postmaster, the first redis-server — are read before
// and after the others, and the reading is taken again, pause after each
// unsettled one, until no parent reaped anything meanwhile: errUnsettled
// after readTries.
func readCPUUse(proc fs.FS, self string, pause time.Duration) (CPUUse, error) {
	var (
		u       CPUUse
		parents map[string]int64 // pid: its children's time, as the last scan read it
	)
	for try := 0; try < readTries; try++ {
		if try > 1 {
			time.Sleep(pause)
		}
		before, err := readChildren(proc, parents)
		if err != nil {
			return u, err
		}
		if u, parents, err = scanCPUUse(proc, self); err != nil {
			return u, err
		}
		after, err := readChildren(proc, parents)
		if err != nil {
			return u, err
		}
		if try > 0 && maps.Equal(before, after) {
			return u, nil
		}
	}
	return u, errUnsettled
}

// readChildren reads the children's time of each of pids now; a process
// that has ended is left out.
func readChildren(proc fs.FS, pids map[string]int64) (map[string]int64, error) {
	now := make(map[string]int64, len(pids))
	for pid := range pids {
		b, err := readPidStat(proc, pid)
		if err != nil {
			return nil, err
		}
		if b == nil {
			continue
		}
		p, err := parsePidStat(b)
		if err != nil {
			return nil, fmt.Errorf("/proc/%s/stat: %w", pid, err)
		}
		now[pid] = p.children
	}
	return now, nil
}

// readPidStat reads /proc/<pid>/stat: nil, with no error, when the
// process has ended since it was listed, or this one may not read it
// (/proc mounted hidepid=1).
func readPidStat(proc fs.FS, pid string) ([]byte, error) {
	b, err := fs.ReadFile(proc, path.Join(pid, "stat"))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) || errors.Is(err, fs.ErrPermission) {
		return nil, nil
	}
	return b, err
}

// scanCPUUse reads /proc/stat, every counted process and self once;
// parents are the counted processes whose children count and whose parent
// is not one of the same name, with their children's time.
func scanCPUUse(proc fs.FS, self string) (CPUUse, map[string]int64, error) {
	var u CPUUse
	stat, err := fs.ReadFile(proc, "stat")
	if err != nil {
		return u, nil, err
	}
	if u.busy, u.steal, u.switches, err = parseStat(stat); err != nil {
		return u, nil, err
	}
	entries, err := fs.ReadDir(proc, ".")
	if err != nil {
		return u, nil, err
	}
	procs := map[string]pidStat{}
	for _, e := range entries {
		if !e.IsDir() || !isPID(e.Name()) {
			continue
		}
		b, err := readPidStat(proc, e.Name())
		if err != nil {
			return u, nil, err
		}
		if b == nil || (e.Name() != self && counted[commOf(b)].add == nil) { // ended, or not one counted
			continue
		}
		p, err := parsePidStat(b)
		if err != nil {
			return u, nil, fmt.Errorf("/proc/%s/stat: %w", e.Name(), err)
		}
		if e.Name() == self {
			u.self = p.own
			continue
		}
		counted[p.comm].add(&u, p)
		procs[e.Name()] = p
	}
	parents := map[string]int64{}
	for pid, p := range procs {
		if pp, ok := procs[p.ppid]; counted[p.comm].children && (!ok || pp.comm != p.comm) {
			parents[pid] = p.children
		}
	}
	return u, parents, nil
}

func isPID(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

var errProcStat = errors.New("malformed")

// parseStat reads /proc/stat: the busy and steal time of every CPU
// together, from its first line — "cpu user nice system idle iowait irq
// softirq steal …" (guest and guest_nice, which follow, are counted in
// user and nice already) — and the context switches, from its "ctxt" line.
func parseStat(stat []byte) (busy, steal, switches int64, err error) {
	line, rest, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, 0, fmt.Errorf("/proc/stat: %w first line %q", errProcStat, line)
	}
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > maxTicks {
			return 0, 0, 0, fmt.Errorf("/proc/stat: %w field %q", errProcStat, v)
		}
		switch i {
		case 3, 4: // idle, iowait
		case 7:
			steal = n
		default:
			busy += n
		}
	}
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		if v, ok := bytes.CutPrefix(line, []byte("ctxt ")); ok {
			if switches, err = strconv.ParseInt(string(v), 10, 64); err != nil || switches < 0 {
				return 0, 0, 0, fmt.Errorf("/proc/stat: %w ctxt %q", errProcStat, v)
			}
			return busy, steal, switches, nil
		}
	}
	return 0, 0, 0, fmt.Errorf("/proc/stat: %w: no ctxt line", errProcStat)
}

// pidStat is what a /proc/<pid>/stat says of a process's CPU time.
type pidStat struct {
	comm     string
	ppid     string
	own      int64 // utime + stime, in clock ticks
	children int64 // cutime + cstime: its children it has reaped
}

// commOf is the comm of a /proc/<pid>/stat: between the first '(' and the
// last ')' — comm may hold spaces and parentheses — or "" if there is none.
func commOf(b []byte) string {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return ""
	}
	return string(b[open+1 : end])
}

// parsePidStat reads "pid (comm) state ppid … utime stime cutime cstime
// …".
func parsePidStat(b []byte) (pidStat, error) {
	var p pidStat
	end := bytes.LastIndexByte(b, ')')
	if open := bytes.IndexByte(b, '('); open < 0 || end < open {
		return p, fmt.Errorf("%w: no (comm)", errProcStat)
	}
	p.comm = commOf(b)
	// After comm: state ppid … utime stime cutime cstime (fields 3, 4, 14–17).
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 15 {
		return p, fmt.Errorf("%w: fewer than 17 fields", errProcStat)
	}
	if !isPID(f[1]) {
		return p, fmt.Errorf("%w: ppid %q", errProcStat, f[1])
	}
	p.ppid = f[1]
	var n [4]int64
	for i, v := range f[11:15] {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil || x < 0 || x > maxTicks {
			return p, fmt.Errorf("%w: CPU time %q", errProcStat, v)
		}
		n[i] = x
	}
	p.own, p.children = n[0]+n[1], n[2]+n[3]
	return p, nil
}
