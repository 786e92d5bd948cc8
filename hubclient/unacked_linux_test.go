package hubclient

import (
	"context"
	"net"
	"testing"

	"einsora.dev/edge/internal/testnet"
)

// A connection the agent dials drops data left unacknowledged as long as
// its keepalive takes to give up, not the kernel's quarter of an hour.
func TestDialedConnectionsBoundUnacknowledgedData(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := NewDialer().DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := testnet.UserTimeout(c); err != nil || got != unackedFor {
		t.Errorf("TCP_USER_TIMEOUT %s (%v), want %s", got, err, unackedFor)
	}
}
