package inventory

import (
	"context"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/protocol"
)

// fakeMachine is a machine whose GPUs a test changes between probes.
type fakeMachine struct {
	mu     sync.Mutex
	gpus   []protocol.GPU
	probes int
}

func (m *fakeMachine) set(gpus ...protocol.GPU) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gpus = gpus
}

func (m *fakeMachine) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.probes
}

func (m *fakeMachine) prober() prober {
	return prober{"gpu", func(context.Context, *Prober) (func(*protocol.Inventory), error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.probes++
		gpus := slices.Clone(m.gpus)
		return func(inv *protocol.Inventory) { inv.GPUs = gpus }, nil
	}}
}

func gpu(id string) protocol.GPU { return protocol.GPU{Vendor: "nvidia", ID: id} }

// waitTimers waits until Watch has armed its timer, so that advancing the
// clock fires it.
func waitTimers(t *testing.T, c *clock.Fake) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.Timers() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("got %d timers, want 1", c.Timers())
		}
		time.Sleep(time.Millisecond)
	}
}

func receive(t *testing.T, ch <-chan protocol.Inventory) protocol.Inventory {
	t.Helper()
	select {
	case inv := <-ch:
		return inv
	case <-time.After(5 * time.Second):
		t.Fatal("got no inventory, want one")
		return protocol.Inventory{}
	}
}

func gpuIDs(inv protocol.Inventory) []string {
	var ids []string
	for _, g := range inv.GPUs {
		ids = append(ids, g.ID)
	}
	return ids
}

func TestWatch(t *testing.T) {
	fake := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	m := &fakeMachine{}
	m.set(gpu("b"), gpu("a"))
	p := New(Options{Root: t.TempDir()})
	p.probers = []prober{m.prober()}
	p.clock = fake

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan protocol.Inventory, 10)
	hup := make(chan os.Signal)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Watch(ctx, time.Minute, hup, func(inv protocol.Inventory) { got <- inv })
	}()

	// The first probe is always reported, its GPUs sorted.
	if ids := gpuIDs(receive(t, got)); !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("first: got GPUs %v, want [a b]", ids)
	}

	// A tick re-probes; the same GPUs in another order are no change.
	m.set(gpu("a"), gpu("b"))
	waitTimers(t, fake)
	fake.Advance(time.Minute)
	waitTimers(t, fake)   // re-armed: the tick was taken
	hup <- syscall.SIGHUP // taken once the tick's probe is done
	if n := m.count(); n < 2 {
		t.Errorf("got %d probes after a tick, want at least 2", n)
	}
	select {
	case inv := <-got:
		t.Errorf("unchanged: got a call with GPUs %v, want none", gpuIDs(inv))
	default:
	}

	// A signal re-probes at once and reports a change.
	m.set(gpu("a"), gpu("b"), gpu("c"))
	hup <- syscall.SIGHUP
	if ids := gpuIDs(receive(t, got)); !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Errorf("after signal: got GPUs %v, want [a b c]", ids)
	}

	// So does a tick.
	m.set(gpu("c"))
	waitTimers(t, fake)
	fake.Advance(time.Minute)
	if ids := gpuIDs(receive(t, got)); !slices.Equal(ids, []string{"c"}) {
		t.Errorf("after tick: got GPUs %v, want [c]", ids)
	}

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after cancel")
	}
	if n := fake.Timers(); n != 0 {
		t.Errorf("got %d timers left, want 0", n)
	}
}

// TestWatchSignalOnly re-probes only on signals when every is 0.
func TestWatchSignalOnly(t *testing.T) {
	fake := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	m := &fakeMachine{}
	m.set(gpu("a"))
	p := New(Options{Root: t.TempDir()})
	p.probers = []prober{m.prober()}
	p.clock = fake

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan protocol.Inventory, 10)
	hup := make(chan os.Signal)
	go p.Watch(ctx, 0, hup, func(inv protocol.Inventory) { got <- inv })
	receive(t, got)
	if n := fake.Timers(); n != 0 {
		t.Errorf("got %d timers, want 0", n)
	}
	m.set(gpu("b"))
	hup <- syscall.SIGHUP
	if ids := gpuIDs(receive(t, got)); !slices.Equal(ids, []string{"b"}) {
		t.Errorf("got GPUs %v, want [b]", ids)
	}
}

func TestWatchCanceledBeforeFirstProbe(t *testing.T) {
	p := New(Options{Root: t.TempDir()})
	p.probers = nil
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	p.Watch(ctx, time.Minute, nil, func(protocol.Inventory) { called = true })
	if called {
		t.Error("got a call after cancel, want none")
	}
}
