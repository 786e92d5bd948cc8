package testnet

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// UserTimeout is c's TCP_USER_TIMEOUT: how long data may stay
// unacknowledged before the kernel drops the connection.
func UserTimeout(c net.Conn) (time.Duration, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, syscall.EINVAL
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var ms int
	var gerr error
	if err := rc.Control(func(fd uintptr) { ms, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) }); err != nil {
		return 0, err
	}
	return time.Duration(ms) * time.Millisecond, gerr
}
