//go:build !unix

package bench

import "time"

// processCPU is not measured on this platform.
func processCPU() time.Duration { return 0 }

// machineCPU is not measured on this platform.
func machineCPU() (time.Duration, bool) { return 0, false }
