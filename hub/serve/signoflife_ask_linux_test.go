package serve

import (
	"net"
	"testing"
	"time"
)

// Issue 13: every presence batch asks for the sign of life of every held
// poll, and an idle peer's changes only when it answers a keepalive probe,
// which its kernel sends after probeIdle without a word: the kernel is
// asked again only once a probe may have been answered since it last
// told, or since a byte last came; what it answers is never made later.
func TestSignOfLifeAsksTheKernelOnlyOnceAProbeMayHaveBeenAnswered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	inner, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	t0 := time.Now()
	now := t0
	c := &countedConn{Conn: inner, now: func() time.Time { return now }, probeIdle: 25 * time.Second}
	c.lastRead.Store(t0.Add(-time.Minute).UnixNano())
	step := func(to time.Duration, asks int64) time.Time {
		t.Helper()
		now = t0.Add(to)
		at := c.signOfLife()
		if got := c.kernelAsks.Load(); got != asks {
			t.Errorf("at +%s: the kernel asked %d times, want %d", to, got, asks)
		}
		if at.After(now) {
			t.Errorf("at +%s: sign of life %s is later than now", to, at.Sub(t0))
		}
		return at
	}
	first := step(0, 1)
	if first.Before(t0.Add(-time.Minute)) {
		t.Fatalf("sign of life %s before the last byte read", first.Sub(t0))
	}
	for _, to := range []time.Duration{5 * time.Second, 20 * time.Second} {
		if at := step(to, 1); !at.Equal(first) {
			t.Errorf("at +%s: sign of life %s, want the kernel's last word %s", to, at.Sub(t0), first.Sub(t0))
		}
	}
	step(first.Sub(t0)+25*time.Second, 2)
	// A byte read starts the probe's wait again.
	read := now.Add(10 * time.Second)
	c.lastRead.Store(read.UnixNano())
	if at := step(read.Sub(t0)+20*time.Second, 2); !at.Equal(read) {
		t.Errorf("sign of life %s, want the byte read at %s", at.Sub(t0), read.Sub(t0))
	}
	step(read.Sub(t0)+26*time.Second, 3)
	// Where the listener's probes are not known, it asks every time.
	c.probeIdle = 0
	step(read.Sub(t0)+27*time.Second, 4)
}
