package serve

import (
	"fmt"
	"testing"
	"time"

	"einsora.dev/edge/clock"
)

func TestReconnectWindowIsTheFleetOverTheRateWithAFloor(t *testing.T) {
	for _, tc := range []struct {
		connected int64
		want      time.Duration
	}{{0, 3 * time.Second}, {1000, 3 * time.Second}, {5000, 10 * time.Second}, {100000, 200 * time.Second}} {
		if got := reconnectWindow(tc.connected, 500, 3*time.Second); got != tc.want {
			t.Errorf("%d connected: window %s, want %s", tc.connected, got, tc.want)
		}
	}
}

// A fleet that returns in one instant to a server just started is let in
// at the rate: the rest are queued, each told a later slot, the slots
// spread at the rate over the backlog; each machine is let in when it
// comes back at its slot, and after the start phase nobody waits.
func TestStartGateQueuesAFleetAtItsRateAndTakesEachBackOnce(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const rate, fleet = 10, 50
	g := newStartGate(clk, rate, time.Minute)
	waits := map[string]time.Duration{}
	admitted := 0
	for i := range fleet {
		id := fmt.Sprintf("m-%d", i)
		ok, wait := g.admit(id)
		if ok {
			admitted++
			continue
		}
		waits[id] = wait
	}
	if admitted != rate {
		t.Fatalf("%d let in at once, want the burst of %d", admitted, rate)
	}
	var last time.Duration
	for i := rate; i < fleet; i++ {
		w := waits[fmt.Sprintf("m-%d", i)]
		if want := time.Duration(i-rate+1) * time.Second / rate; w != want {
			t.Errorf("machine %d: slot in %s, want %s", i, w, want)
		}
		last = max(last, w)
	}
	if want := time.Duration(fleet-rate) * time.Second / rate; last != want {
		t.Errorf("the queue ends in %s, want the backlog over the rate, %s", last, want)
	}
	// Early is told the same slot; at its slot, each is let in once.
	if ok, w := g.admit("m-49"); ok || w != last {
		t.Errorf("early return: admitted %v, wait %s, want the slot %s", ok, w, last)
	}
	clk.Advance(last)
	for id := range waits {
		if ok, _ := g.admit(id); !ok {
			t.Errorf("%s refused at its slot", id)
		}
	}
	// A newcomer while a queue waits joins its end, not the front.
	g2 := newStartGate(clk, 1, time.Minute)
	g2.admit("a")
	if ok, w := g2.admit("b"); ok || w != time.Second {
		t.Errorf("second at rate 1: admitted %v, wait %s", ok, w)
	}
	if ok, w := g2.admit("c"); ok || w != 2*time.Second {
		t.Errorf("third at rate 1: admitted %v, wait %s, want behind the queue", ok, w)
	}
	clk.Advance(1500 * time.Millisecond) // a token again, but c still waits
	if ok, w := g2.admit("d"); ok || w != 1500*time.Millisecond {
		t.Errorf("newcomer while the queue waits: admitted %v, wait %s, want behind c", ok, w)
	}
	clk.Advance(time.Minute)
	if ok, _ := g2.admit("e"); !ok {
		t.Error("refused after the start phase")
	}
}
