package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"einsora.dev/edge/protocol"
)

// supervise returns only once every companion has stopped.
func TestSuperviseWaitsForCompanions(t *testing.T) {
	var stopped atomic.Int64
	companion := func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a companion slow to wind down
		stopped.Add(1)
	}
	want := errors.New("main ended")
	err := supervise(context.Background(), func(context.Context) error { return want }, companion, companion)
	if !errors.Is(err, want) {
		t.Errorf("got %v, want main's error", err)
	}
	if n := stopped.Load(); n != 2 {
		t.Errorf("supervise returned with %d of 2 companions stopped", n)
	}
}

// SIGHUP probes the drivers and the inventory again at once.
func TestHangupReprobes(t *testing.T) {
	f := newFakeHub()
	var fl *flaky
	var cpus atomic.Int64
	cpus.Store(4)
	h := startAgent(t, t.TempDir(), f, withFlaky(&fl), func(c *Config) {
		c.Inventory = func(context.Context) protocol.Inventory {
			return protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: int(cpus.Load()), MemoryMB: 1024}
		}
	})
	waitFor(t, "the first inventory", func() bool { return f.lastInventory() != nil })
	hup := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.agent.forwardHangups(ctx, hup) }()
	defer func() { cancel(); <-done }()
	fl.down.Store(true)
	hup <- syscall.SIGHUP
	waitFor(t, "the driver dropped on SIGHUP", func() bool {
		inv := f.lastInventory()
		return !slices.Contains(inv.Drivers, "sim")
	})
}

// An agent that is not enrolled stops at once, leaving its state directory
// unlocked and its drivers closed.
func TestRunNetworkedNotEnrolled(t *testing.T) {
	dir := t.TempDir()
	err := RunNetworked(context.Background(), NetworkedConfig{StateDir: dir, Drivers: "sim", Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("got %v, want ErrNotEnrolled", err)
	}
	lock, err := lockState(dir)
	if err != nil {
		t.Fatalf("the state directory after RunNetworked: %v", err)
	}
	lock.Unlock()
}
