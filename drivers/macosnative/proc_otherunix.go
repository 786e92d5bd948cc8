//go:build unix && !linux && !darwin

package macosnative

// procInfo: no start time here; the driver checks liveness only.
func procInfo(pid int) (uint64, bool, error) { return 0, false, errNoStartTime }
