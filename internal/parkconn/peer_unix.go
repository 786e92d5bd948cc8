//go:build unix

package parkconn

import (
	"errors"
	"net"
	"syscall"
)

// PeerGone reports whether a parked connection's peer has closed or reset
// it, its keepalives have failed, or it sent anything: an HTTP/1.1 client
// sends nothing while it waits for an answer but a close_notify before
// its FIN. It peeks without waiting.
func PeerGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = !errors.Is(rerr, syscall.EAGAIN) && !errors.Is(rerr, syscall.EINTR)
		return true
	})
	return gone || err != nil
}
