package serve

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/internal/testnet"
)

// Issue 13: connections accepted together must not probe together. Each
// one's first keepalive probe comes at its own time between half the
// listener's idle time and all of it; once that probe may have been
// answered, the idle time is the listener's again, so the spread phase is
// kept and the probes are no more frequent than before.
func TestKeepaliveProbesOfConnectionsAcceptedTogetherSpread(t *testing.T) {
	const idle, conns = 20 * time.Second, 40
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	now := t0
	ln := &countingListener{
		Listener: inner, slots: newHandshakeSlots(1, time.Now), untrusted: newSources(conns, conns),
		timeout: time.Minute, refused: new(atomic.Int64), now: func() time.Time { return now }, probeIdle: idle,
	}
	defer ln.Close()
	var dialled []net.Conn
	defer func() {
		for _, c := range dialled {
			c.Close()
		}
	}()
	firsts := map[time.Duration]int{}
	var accepted []*countedConn
	for range conns {
		d, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		dialled = append(dialled, d)
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cc := c.(*countedConn)
		accepted = append(accepted, cc)
		first, err := testnet.KeepAliveIdle(cc.Conn)
		if err != nil {
			t.Fatal(err)
		}
		if first < idle/2 || first > idle {
			t.Errorf("first probe after %s, want between %s and %s", first, idle/2, idle)
		}
		firsts[first]++
		if at := time.Unix(0, cc.rephaseAt.Load()); at.Before(t0.Add(first)) || at.After(t0.Add(first+2*time.Second)) {
			t.Errorf("first probe after %s: idle time restored at +%s, want just after it", first, at.Sub(t0))
		}
	}
	// Ten whole seconds to draw from: forty connections on three values
	// or fewer would be a chance of about 10^-19.
	if len(firsts) < 4 {
		t.Errorf("%d connections accepted together have %d first-probe times: %v", conns, len(firsts), firsts)
	}
	now = t0.Add(idle / 2)
	for _, cc := range accepted {
		cc.signOfLife()
	}
	restored := 0
	for _, cc := range accepted {
		got, err := testnet.KeepAliveIdle(cc.Conn)
		if err != nil {
			t.Fatal(err)
		}
		if got == idle {
			restored++
		}
	}
	if restored == conns {
		t.Errorf("every idle time restored at +%s, before some first probes", idle/2)
	}
	now = t0.Add(idle + 2*time.Second)
	for i, cc := range accepted {
		cc.signOfLife()
		if got, err := testnet.KeepAliveIdle(cc.Conn); err != nil || got != idle {
			t.Errorf("connection %d: idle %s (%v) after its first probe, want the listener's %s", i, got, err, idle)
		}
		if cc.rephaseAt.Load() != 0 {
			t.Errorf("connection %d: still to be restored", i)
		}
	}
}
