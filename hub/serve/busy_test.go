package serve

import (
	"context"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store/storetest"
)

// A replica that turned a machine away for its load, or made a handshake
// wait for a slot, within the last refresh publishes no count of its polls,
// so no other replica sends it agents to even out the fleet (a cold connect
// or a storm of failovers makes its count low for its load, not for want of
// agents); a refresh later it counts again.
func TestBusyReplicaPublishesNoCount(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC))
	const url = "https://a.example:8443"
	s, st := testServerOf(t, Limits{MaxHandshakes: 1}, hub.Config{URL: url}, clk)
	published := func() int {
		t.Helper()
		if err := s.hub.RefreshReplicas(context.Background()); err != nil {
			t.Fatal(err)
		}
		return storetest.ReplicaPolls(t, st, url)
	}
	published() // the first refresh is in flux
	if got := published(); got != 0 {
		t.Fatalf("an idle replica published %d polls, want 0", got)
	}
	s.noteShed()
	if got := published(); got != -1 {
		t.Errorf("a replica that just turned a machine away published %d polls, want none (-1)", got)
	}
	clk.Advance(hub.ReplicaRefresh)
	if got := published(); got != 0 {
		t.Errorf("a refresh after it turned a machine away, it published %d polls, want 0", got)
	}
	if !s.handshakes.take(0) {
		t.Fatal("no handshake slot")
	}
	if s.handshakes.take(time.Millisecond) {
		t.Fatal("a second handshake slot past MaxHandshakes 1")
	}
	if got := published(); got != -1 {
		t.Errorf("a replica whose handshake waited for a slot published %d polls, want none (-1)", got)
	}
}
