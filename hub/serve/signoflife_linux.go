package serve

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// kernelSignOfLife: Linux tells when a connection's peer last answered
// (TCP_INFO), keepalive probes included, so the hub's kernel keepalive is
// the sign of life of a held poll and the hub need not ping.
const kernelSignOfLife = true

// sinceLastAck is how long ago c's peer last acknowledged anything, the
// answers to the kernel's keepalive probes included.
func sinceLastAck(c net.Conn) (time.Duration, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var (
		info *unix.TCPInfo
		gerr error
	)
	if err := rc.Control(func(fd uintptr) { info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil || gerr != nil {
		return 0, false
	}
	return time.Duration(info.Last_ack_recv) * time.Millisecond, true
}

// boundUnacked makes the kernel drop c when data it sent stays
// unacknowledged for d: an answer written to a vanished agent would
// otherwise be retransmitted for a quarter of an hour.
func boundUnacked(c net.Conn, d time.Duration) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	if rc, err := sc.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		})
	}
}
