//go:build !linux

package macosnative

import "einsora.dev/edge/protocol"

// LimitsEnforced reports whether setLimits bounds memory on this OS.
const LimitsEnforced = false

// setLimits does nothing here: darwin has no prlimit, so a limit could only
// be set between fork and exec, which Go's os/exec does not offer. The
// class's memory is reserved by placement but not enforced.
func setLimits(int, protocol.Resources) error { return nil }
