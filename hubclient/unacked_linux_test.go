package hubclient

import (
	"context"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A connection the agent dials drops data left unacknowledged as long as
// its keepalive takes to give up, not the kernel's quarter of an hour.
func TestDialedConnectionsBoundUnacknowledgedData(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := dialer().DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) })
	if gerr != nil || got != int(unackedFor.Milliseconds()) {
		t.Errorf("TCP_USER_TIMEOUT %d ms (%v), want %d", got, gerr, unackedFor.Milliseconds())
	}
}
