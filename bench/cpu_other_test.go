//go:build !unix

package bench

import "time"

// processCPU cannot tell the process's CPU time here.
func processCPU() (time.Duration, bool) { return 0, false }
