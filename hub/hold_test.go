package hub

import (
	"context"
	"fmt"
	"testing"
	"time"

	"einsora.dev/edge/protocol"
)

func TestHoldIsDrawnWithinBounds(t *testing.T) {
	const timeout = 40 * time.Second
	lo := time.Duration(MinHoldFraction * float64(timeout))
	for _, tc := range []struct {
		u    float64
		want time.Duration
	}{{0, lo}, {0.5, lo + (timeout-lo)/2}, {1, timeout}, {-3, lo}, {7, timeout}} {
		if got := holdFor(timeout, func() float64 { return tc.u }); got != tc.want {
			t.Errorf("draw %v: hold %s, want %s", tc.u, got, tc.want)
		}
	}
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := holdFor(timeout, nil)
		if d < lo || d > timeout {
			t.Fatalf("hold %s outside [%s, %s]", d, lo, timeout)
		}
		seen[d] = true
	}
	if len(seen) < 900 {
		t.Errorf("%d distinct holds in 1000 draws, want them to differ", len(seen))
	}
}

// A fleet whose polls all arrive in one instant (after a restart) is
// answered over the jitter window, not in one burst: its next polls do
// not march in step.
func TestFleetPollingAtOneInstantIsAnsweredAcrossTheWindow(t *testing.T) {
	h := newTestHub(t)
	const fleet = 60
	got := make(chan *protocol.SyncResponse, fleet)
	for i := range fleet {
		id := fmt.Sprintf("m-%d", i)
		h.machine(id)
		d := h.desired(id)
		go func() {
			resp, _ := h.Sync(context.Background(), id, &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: d.StoreID, Generation: d.Generation})
			got <- resp
		}()
	}
	waitTimers(t, h.clk, fleet)
	start := h.clk.Now()
	lo := time.Duration(MinHoldFraction * float64(DefaultPollTimeout))
	// Step through the window a tenth at a time; the timers left say how
	// many polls were answered in each step.
	const slots = 10
	step := (DefaultPollTimeout - lo) / slots
	h.clk.Advance(lo - time.Millisecond)
	if n := h.clk.Timers(); n != fleet {
		t.Fatalf("%d polls answered before the shortest hold", fleet-n)
	}
	h.clk.Advance(time.Millisecond)
	left, busiest, used := h.clk.Timers(), 0, 0
	for range slots {
		h.clk.Advance(step)
		n := h.clk.Timers()
		if left-n > 0 {
			used++
		}
		busiest = max(busiest, left-n)
		left = n
	}
	if left != 0 {
		t.Fatalf("%d polls still held at %s, past the timeout", left, h.clk.Now().Sub(start))
	}
	for range fleet {
		if resp := <-got; resp == nil || !resp.Unchanged {
			t.Fatalf("got %+v, want unchanged at the hold's end", resp)
		}
	}
	// 60 uniform draws over 10 slots: all in a few slots, or a third in
	// one, would be a burst (the odds by chance are far below 1e-6).
	if used < 7 || busiest > fleet/3 {
		t.Errorf("answers in %d of %d slots, busiest slot %d of %d: want them spread over the window", used, slots, busiest, fleet)
	}
}
