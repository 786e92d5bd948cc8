package fleetbench

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// Every agent has its own loopback source address.
func TestSourceAddrsDistinctAndLoopback(t *testing.T) {
	seen := map[string]bool{}
	for i := range maxN {
		ip := sourceAddr(i)
		if !ip.IsLoopback() || seen[ip.String()] {
			t.Fatalf("agent %d: %s is not loopback or not its own", i, ip)
		}
		seen[ip.String()] = true
	}
}

// The counting dialer refuses anything but loopback.
func TestDialerLoopbackOnly(t *testing.T) {
	var m meter
	_, err := m.dialer(0)(context.Background(), "tcp", "192.0.2.1:443")
	if err == nil || !strings.Contains(err.Error(), "loopback only") {
		t.Fatalf("got %v, want a refusal", err)
	}
	if m.dials.Load() != 0 {
		t.Errorf("a refused dial was counted")
	}
}

// The counting dialer counts dials and bytes both ways.
func TestMeterCounts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 5)
		c.Read(b)
		c.Write([]byte("hi"))
	}()
	var m meter
	c, err := m.dialer(3)(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.LocalAddr().(*net.TCPAddr).IP; !got.Equal(sourceAddr(3)) {
		t.Errorf("dialled from %s, want %s", got, sourceAddr(3))
	}
	c.Write([]byte("hello"))
	b := make([]byte, 2)
	c.Read(b)
	if m.dials.Load() != 1 || m.bytes.Load() != 7 {
		t.Errorf("%d dials, %d bytes; want 1 and 7", m.dials.Load(), m.bytes.Load())
	}
}

// This process's CPU time grows with work, and its RSS is read.
func TestProcReadings(t *testing.T) {
	pid := os.Getpid()
	a, err := cpuTime(pid)
	if err != nil {
		t.Skip("no /proc here:", err)
	}
	end := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(end); x++ {
		_ = x * x
	}
	b, err := cpuTime(pid)
	if err != nil || b <= a {
		t.Errorf("CPU time %s then %s (%v), want it to grow", a, b, err)
	}
	if kb, err := rssKiB(pid); err != nil || kb <= 0 {
		t.Errorf("RSS %d KiB, %v", kb, err)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(101-i))
	}
	if p50, p99 := percentile(ds, 50), percentile(ds, 99); p50 != 50 || p99 != 99 {
		t.Errorf("p50 %d, p99 %d; want 50 and 99", p50, p99)
	}
	if percentile(nil, 99) != 0 {
		t.Error("no samples: want 0")
	}
}
