//go:build !linux && !darwin

package hubclient

import "time"

// boundUnacked: elsewhere the kernel's own retransmission limit applies.
func boundUnacked(uintptr, time.Duration) error { return nil }
