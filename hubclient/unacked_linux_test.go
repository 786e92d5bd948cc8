package hubclient

import (
	"context"
	"net"
	"testing"
	"time"

	"einsora.dev/edge/internal/testnet"
)

// A connection the agent dials drops data left unacknowledged as long as
// its keepalive takes to give up, not the kernel's quarter of an hour; a
// dialer of another idle time moves the bound with it.
func TestDialedConnectionsBoundUnacknowledgedData(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		name string
		d    *net.Dialer
		idle time.Duration
		want time.Duration
	}{
		{"NewDialer", NewDialer(), KeepAliveIdle, unackedFor},
		{"NewDialerIdle", NewDialerIdle(3 * time.Minute), 3 * time.Minute, 3*time.Minute + KeepAliveCount*KeepAliveIntvl},
	} {
		c, err := tc.d.DialContext(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if got, err := testnet.UserTimeout(c); err != nil || got != tc.want {
			t.Errorf("%s: TCP_USER_TIMEOUT %s (%v), want %s", tc.name, got, err, tc.want)
		}
		if got, err := testnet.KeepAliveIdle(c); err != nil || got != tc.idle {
			t.Errorf("%s: TCP_KEEPIDLE %s (%v), want %s", tc.name, got, err, tc.idle)
		}
		c.Close()
	}
}
