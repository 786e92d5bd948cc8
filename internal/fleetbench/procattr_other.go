//go:build !linux

package fleetbench

import "syscall"

// serverProcAttr is the default elsewhere: no kernel outlives-its-parent
// signal.
func serverProcAttr() *syscall.SysProcAttr { return nil }
