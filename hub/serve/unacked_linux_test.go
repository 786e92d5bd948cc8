package serve

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/internal/testnet"
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
		Listener: inner, slots: newHandshakeSlots(1, time.Now), untrusted: newSources(4, 4),
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
	if got, err := testnet.UserTimeout(c.(*countedConn).Conn); err != nil || got != unackedFor {
		t.Errorf("TCP_USER_TIMEOUT %s (%v), want %s", got, err, unackedFor)
	}
}
