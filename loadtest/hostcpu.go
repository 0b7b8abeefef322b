package loadtest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// CPUUse is the CPU time a Linux host has spent so far, all of it and
// that of the processes of PostgreSQL and of Redis on it, from /proc, in
// /proc's clock ticks. Two readings around a run give, by Since, where the
// host's CPUs went: on a host whose CPUs a run keeps busy, a server in
// front of the database can only serve what the CPU time left to the
// database allows.
type CPUUse struct{ busy, steal, postgres, redis, switches int64 }

// CPUTimes is the CPU time spent between two readings of CPUUse.
type CPUTimes struct {
	// Busy is the time of every CPU outside idle, I/O wait and steal
	// (user, nice, system, irq, softirq).
	Busy time.Duration
	// Steal is the time a virtual machine's CPUs were ready to run and
	// the hypervisor ran something else: time the host's own figures do
	// not see, which slows every process on it.
	Steal time.Duration
	// Postgres is that of the processes named postgres: the postmaster,
	// every live backend, and the backends that have exited (the
	// postmaster's reaped children) — a pgbench run's connections end
	// with it, and their time would go missing from the live ones alone.
	Postgres time.Duration
	// Redis is that of the processes named redis-server.
	Redis time.Duration
	// Switches is the count of context switches of every CPU.
	Switches int64
}

// Since is the CPU time spent from earlier to u.
func (u CPUUse) Since(earlier CPUUse) CPUTimes {
	return CPUTimes{Busy: ticks(u.busy - earlier.busy), Steal: ticks(u.steal - earlier.steal),
		Postgres: ticks(u.postgres - earlier.postgres), Redis: ticks(u.redis - earlier.redis),
		Switches: u.switches - earlier.switches}
}

// clockTick is the unit of /proc's CPU times: USER_HZ, which Linux's ABI
// fixes at 100 a second on the architectures Go builds for.
const clockTick = 10 * time.Millisecond

// ticks is n clock ticks as a duration, saturated at the longest one.
func ticks(n int64) time.Duration {
	const most = math.MaxInt64 / int64(clockTick)
	return time.Duration(min(max(n, -most), most)) * clockTick
}

// maxTicks bounds one CPU time field of /proc: about 350 years of a CPU,
// so that summing them, over fields and processes, cannot overflow.
const maxTicks = 1 << 40

// ReadCPUUse reads the host's CPU use so far from /proc. A process that
// ends while it is read is left out of that reading.
func ReadCPUUse() (CPUUse, error) { return readCPUUse(os.DirFS("/proc")) }

// readCPUUse reads proc, a file system laid out as Linux's /proc.
func readCPUUse(proc fs.FS) (CPUUse, error) {
	var u CPUUse
	stat, err := fs.ReadFile(proc, "stat")
	if err != nil {
		return u, err
	}
	if u.busy, u.steal, u.switches, err = parseStat(stat); err != nil {
		return u, err
	}
	entries, err := fs.ReadDir(proc, ".")
	if err != nil {
		return u, err
	}
	for _, e := range entries {
		if !e.IsDir() || !isPID(e.Name()) {
			continue
		}
		b, err := fs.ReadFile(proc, path.Join(e.Name(), "stat"))
		if err != nil { // it ended after the listing
			continue
		}
		p, err := parsePidStat(b)
		if err != nil {
			return u, fmt.Errorf("/proc/%s/stat: %w", e.Name(), err)
		}
		switch p.comm {
		case "postgres":
			u.postgres += p.own + p.children
		case "redis-server":
			u.redis += p.own
		}
	}
	return u, nil
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
// softirq steal …" (guest time, which follows, is counted in user
// already) — and the context switches, from its "ctxt" line.
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
	own      int64 // utime + stime, in clock ticks
	children int64 // cutime + cstime: its children it has waited for
}

// parsePidStat reads "pid (comm) state ppid … utime stime cutime cstime
// …": comm may hold spaces and parentheses, so it ends at the last ')'.
func parsePidStat(b []byte) (pidStat, error) {
	var p pidStat
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return p, fmt.Errorf("%w: no (comm)", errProcStat)
	}
	p.comm = string(b[open+1 : end])
	// After comm: state (field 3) … utime stime cutime cstime (fields
	// 14–17), here the 12th to the 15th.
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 15 {
		return p, fmt.Errorf("%w: fewer than 17 fields", errProcStat)
	}
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
