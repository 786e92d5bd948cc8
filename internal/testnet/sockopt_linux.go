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
	ms, err := tcpOption(c, unix.TCP_USER_TIMEOUT)
	return time.Duration(ms) * time.Millisecond, err
}

// KeepAliveIdle is c's TCP_KEEPIDLE: how long the connection is silent
// before its kernel sends the first keepalive probe.
func KeepAliveIdle(c net.Conn) (time.Duration, error) {
	s, err := tcpOption(c, unix.TCP_KEEPIDLE)
	return time.Duration(s) * time.Second, err
}

func tcpOption(c net.Conn, opt int) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, syscall.EINVAL
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, opt) }); err != nil {
		return 0, err
	}
	return v, gerr
}
