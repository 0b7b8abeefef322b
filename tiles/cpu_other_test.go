//go:build !linux

package tiles_test

import "time"

// threadCPU is not measured outside Linux.
func threadCPU() time.Duration { return -1 }
