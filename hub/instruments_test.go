package hub

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

type fakeMetrics struct {
	mu         sync.Mutex
	wakes      []time.Duration
	passes     int
	placements map[[2]string]int
}

func (m *fakeMetrics) WakeLatency(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.wakes = append(m.wakes, d)
}
func (m *fakeMetrics) AdmitPass(time.Duration) { m.mu.Lock(); m.passes++; m.mu.Unlock() }
func (m *fakeMetrics) Placement(outcome, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.placements[[2]string{outcome, reason}]++
}

// The hub measures passes, placements by outcome and bounded reason (each
// decision once, not once per pass), and the wake-up of a held poll from
// the commit that caused it.
func TestHubMeasuresPassesPlacementsAndWakes(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := clock.NewFake(epoch)
	m := &fakeMetrics{placements: map[[2]string]int{}}
	hh, err := New(context.Background(), Config{AllowSim: true, Store: st, Clock: clk, Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := &testHub{Hub: hh, t: t, clk: clk, st: st}
	if err := h.EnsureTenant(context.Background(), "local"); err != nil {
		t.Fatal(err)
	}
	h.create("a", protocol.KindContainer)
	h.pass()
	h.pass()
	if got := m.placements[[2]string{OutcomeQueued, "no_machine"}]; got != 1 {
		t.Errorf("queued for no machine counted %d times over two passes, want 1", got)
	}
	h.machine("m-1")
	h.pass()
	if got := m.placements[[2]string{OutcomePlaced, ReasonNone}]; got != 1 {
		t.Errorf("placed counted %d times, want 1", got)
	}
	if m.passes != 3 {
		t.Errorf("%d passes measured, want 3", m.passes)
	}

	// A poll held at the machine's generation, woken by a placement.
	resp := h.desired("m-1")
	done := make(chan error, 1)
	go func() {
		_, err := h.Sync(context.Background(), "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: resp.StoreID, Generation: resp.Generation})
		done <- err
	}()
	for h.WaitingPolls() == 0 {
		time.Sleep(time.Millisecond)
	}
	h.create("b", protocol.KindContainer)
	h.pass()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.wakes) != 1 {
		t.Errorf("%d wake latencies, want 1", len(m.wakes))
	}
}
