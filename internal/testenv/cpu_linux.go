//go:build linux

package testenv

import (
	"syscall"
	"time"
)

// rusageThread is Linux's RUSAGE_THREAD: the calling thread's usage.
const rusageThread = 1

// ThreadCPU is the CPU time the calling OS thread has used, or -1. A
// benchmark that locks its goroutine to its thread measures its own work
// with it, apart from whatever else shares the machine.
func ThreadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
