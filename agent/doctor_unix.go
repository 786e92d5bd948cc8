//go:build unix

package agent

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// checkDisk warns when the state directory's file system is nearly full:
// the agent's state is rewritten whole, and a full disk stops it recording
// attempts, so it stops starting workloads.
func checkDisk(dir string) Check {
	c := Check{Name: "disk space"}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		c.Verdict, c.Detail, c.Fix = Warn, "cannot tell: "+err.Error(), "see the state directory check"
		return c
	}
	free := st.Bavail * uint64(st.Bsize)
	c.Detail = fmt.Sprintf("%d MB free under %s", free>>20, dir)
	if free < 1<<30 {
		c.Verdict, c.Fix = Warn, "free space on that file system; images and volumes need it too"
		return c
	}
	c.Verdict = OK
	return c
}
