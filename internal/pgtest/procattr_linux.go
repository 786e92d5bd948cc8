package pgtest

import "syscall"

// procAttr runs a server process as cred (nil: as the test) and has the
// kernel stop it if the test process dies first.
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
}
