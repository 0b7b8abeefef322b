//go:build !linux

package testenv

import "time"

// ThreadCPU is not measured outside Linux: it is -1.
func ThreadCPU() time.Duration { return -1 }
