//go:build linux

package macosnative

import (
	"fmt"

	"golang.org/x/sys/unix"

	"einsora.dev/edge/protocol"
)

// LimitsEnforced reports whether setLimits bounds memory on this OS.
const LimitsEnforced = true

// setLimits bounds the process's data (RLIMIT_DATA: its private writable
// memory, the heap included) to the class's memory. It is set with prlimit
// right after the start, so the program's first instructions run
// unbounded; children inherit it. RLIMIT_AS is not used: it counts address
// space merely reserved, and a Go program cannot even start under 512 MiB
// of it. RLIMIT_NPROC is not set: it counts every process of the user, the
// agent's included, so it cannot bound one workload. CPUs are not bounded:
// rlimits have no share of a CPU.
func setLimits(pid int, r protocol.Resources) error {
	if r.MemoryMB <= 0 {
		return nil
	}
	lim := uint64(r.MemoryMB) << 20
	if err := unix.Prlimit(pid, unix.RLIMIT_DATA, &unix.Rlimit{Cur: lim, Max: lim}, nil); err != nil {
		return fmt.Errorf("prlimit RLIMIT_DATA of pid %d: %w", pid, err)
	}
	return nil
}
