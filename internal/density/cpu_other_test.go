//go:build !linux

package density_test

import "time"

// threadCPU is not measured outside Linux.
func threadCPU() time.Duration { return -1 }
