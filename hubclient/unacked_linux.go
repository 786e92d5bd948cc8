package hubclient

import (
	"time"

	"golang.org/x/sys/unix"
)

// boundUnacked makes the kernel drop the connection when data sent on it
// stays unacknowledged for d (by default it retransmits for about a
// quarter of an hour).
func boundUnacked(fd uintptr, d time.Duration) error {
	return unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
}
