package fleetbench

import "syscall"

// serverProcAttr has the kernel kill a server process the bench started
// if the bench dies first: an interrupted run left its hubs running,
// retrying a store that was gone, and their load in the next run's
// figures.
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
