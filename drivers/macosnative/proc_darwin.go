//go:build darwin

package macosnative

import "golang.org/x/sys/unix"

// sZomb is darwin's SZOMB process state (sys/proc.h).
const sZomb = 5

// procInfo reads pid's start time (microseconds since the epoch) and
// whether it is a zombie, through sysctl kern.proc.pid.
func procInfo(pid int) (start uint64, zombie bool, err error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return 0, false, err
	}
	if int(kp.Proc.P_pid) != pid {
		return 0, false, unix.ESRCH
	}
	tv := kp.Proc.P_starttime
	return uint64(tv.Sec)*1e6 + uint64(tv.Usec), kp.Proc.P_stat == sZomb, nil
}
