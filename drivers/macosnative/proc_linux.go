//go:build linux

package macosnative

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procInfo reads pid's start time (clock ticks since boot) and whether it
// is a zombie from /proc/<pid>/stat.
func procInfo(pid int) (start uint64, zombie bool, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if _, serr := os.Stat("/proc/self/stat"); serr != nil {
			return 0, false, errNoStartTime // no /proc: liveness only
		}
		return 0, false, err
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses,
	// so the fields start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 {
		return 0, false, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("/proc/%d/stat: starttime: %w", pid, err)
	}
	return start, f[0] == "Z" || f[0] == "X", nil
}
