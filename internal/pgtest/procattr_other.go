//go:build !linux

package pgtest

import "syscall"

// procAttr runs a server process as cred (nil: as the test).
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
