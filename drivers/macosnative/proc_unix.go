//go:build unix

package macosnative

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

const supported = true

// errNoStartTime: this OS gives no process start time; liveness only.
var errNoStartTime = errors.New("process start time not available on this OS")

// startDetached starts c in a session of its own, so it is its own process
// group (pgid = pid) and outlives the agent.
func startDetached(c *exec.Cmd) error {
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return c.Start()
}

// alive reports whether pid runs and, when start is known, is the process
// that started at start rather than a later one given the same pid.
func alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
		return false
	}
	st, zombie, err := procInfo(pid)
	if errors.Is(err, errNoStartTime) {
		return true
	}
	if err != nil || zombie {
		return false
	}
	return start == 0 || st == start
}

// procStart returns pid's start time as procInfo reads it.
func procStart(pid int) (uint64, error) {
	st, _, err := procInfo(pid)
	return st, err
}

// termGroup sends SIGTERM to the process group led by pid.
func termGroup(pid int) error { return signalGroup(pid, unix.SIGTERM) }

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) error { return signalGroup(pid, unix.SIGKILL) }

func signalGroup(pid int, sig unix.Signal) error {
	if pid <= 0 {
		return fmt.Errorf("bad pid %d", pid)
	}
	err := unix.Kill(-pid, sig)
	if errors.Is(err, unix.ESRCH) {
		// No group (it was not a leader, or it is gone): the process alone.
		err = unix.Kill(pid, sig)
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
	}
	return err
}

// exitStatus reads a reaped process's exit: its code, or 128+N for a
// process killed by signal N, as shells report it.
func exitStatus(ps *os.ProcessState) (int, string) {
	if ps == nil {
		return -1, "exit status unknown"
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return ps.ExitCode(), ""
}
