//go:build !unix

package macosnative

import (
	"errors"
	"os"
	"os/exec"
)

const supported = false

var errUnsupported = errors.New("macos-native: processes are not supported on this OS")

func startDetached(*exec.Cmd) error { return errUnsupported }
func alive(int, uint64) bool        { return false }
func procStart(int) (uint64, error) { return 0, errUnsupported }
func termGroup(int) error           { return errUnsupported }
func killGroup(int) error           { return errUnsupported }
func exitStatus(ps *os.ProcessState) (int, string) {
	if ps == nil {
		return -1, "exit status unknown"
	}
	return ps.ExitCode(), ""
}
