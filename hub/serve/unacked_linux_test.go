package serve

import (
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A connection the hub accepts drops data left unacknowledged as long as
// its keepalive takes to give up: an answer written to a vanished agent is
// not retransmitted for a quarter of an hour.
func TestAcceptedConnectionsBoundUnacknowledgedData(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{
		Listener: inner, slots: newHandshakeSlots(1), untrusted: newSources(4, 4),
		timeout: time.Second, refused: new(atomic.Int64), now: time.Now,
	}
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", inner.Addr().String()); err == nil {
			defer c.Close()
			time.Sleep(time.Second)
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*countedConn).Conn.(syscall.Conn).SyscallConn()
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
