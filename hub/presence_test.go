package hub

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// TestPresenceEdges pins rule 8's thresholds at their edges: 45 s for
// online, 10 min for failing, the hub's start for both.
func TestPresenceEdges(t *testing.T) {
	clk := clock.NewFake(epoch)
	started := epoch.Add(-time.Hour)
	// m-poll's poll waits on a connection heard just now; m-quiet's on
	// one last heard 45 s ago.
	polling := map[string]time.Duration{"m-poll": 0, "m-quiet": 45 * time.Second}
	p := presence{clk: clk, offlineAfter: DefaultOfflineAfter, failAfter: DefaultOfflineFailAfter, started: started,
		held: func(id string, now time.Time) (time.Time, bool) {
			ago, ok := polling[id]
			return now.Add(-ago), ok
		}}
	at := func(ago time.Duration) store.Machine { return store.Machine{ID: "m", LastSync: epoch.Add(-ago)} }
	last := func(m store.Machine) store.LastSync { return store.LastSync{Machine: m.ID, At: m.LastSync} }
	tests := []struct {
		name string
		got  bool
		want bool
	}{
		{"synced 44s ago is online", p.online(at(44 * time.Second)), true},
		{"synced 45s ago is offline", p.online(at(45 * time.Second)), false},
		{"never synced is offline", p.online(store.Machine{ID: "m"}), false},
		{"a waiting poll is online", p.online(store.Machine{ID: "m-poll"}), true},
		{"heard 44s ago", p.heard(last(at(44 * time.Second))), true},
		{"not heard 45s ago", p.heard(last(at(45 * time.Second))), false},
		{"gone after 10 min", p.gone(last(at(10 * time.Minute))), true},
		{"not gone before 10 min", p.gone(last(at(10*time.Minute - time.Second))), false},
		{"a waiting poll is never gone", p.gone(store.LastSync{Machine: "m-poll", At: epoch.Add(-24 * time.Hour)}), false},
		{"a poll waiting on a connection heard 45s ago is offline", p.online(store.Machine{ID: "m-quiet"}), false},
		{"nor heard", p.heard(store.LastSync{Machine: "m-quiet", At: epoch.Add(-time.Hour)}), false},
		{"its silence counts from its last sign of life", p.offlineFor(store.Machine{ID: "m-quiet", LastSync: epoch.Add(-time.Hour)}) == 45*time.Second, true},
		// Silent since before the hub started: only the hub's hour counts.
		{"hub's downtime not counted", p.gone(last(at(2 * time.Hour))), true},
		{"returning after 45s", p.returning(at(45*time.Second), epoch), true},
		{"not returning after 44s", p.returning(at(44*time.Second), epoch), false},
		{"first report since this hub started", p.returning(at(2*time.Hour), epoch), true},
		{"was online 44s before", p.wasOnline(at(44*time.Second), epoch), true},
		{"was not online 45s before", p.wasOnline(at(45*time.Second), epoch), false},
		{"started an hour ago", p.justStarted(), false},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v", tt.name, tt.got)
		}
	}
	p.started = epoch.Add(-9 * time.Minute)
	if p.gone(last(at(time.Hour))) {
		t.Error("a machine silent since before a hub started 9 min ago is gone: the hub's downtime counted")
	}
	if p.justStarted() {
		t.Error("justStarted 9 min after the start")
	}
	p.started = epoch.Add(-44 * time.Second)
	if !p.justStarted() {
		t.Error("not justStarted 44 s after the start")
	}
}

// Rule 8 on a long hold: a waiting poll counts as contact only as of its
// connection's last sign of life. While the connection shows the machine
// alive (the kernel's keepalive answered), the machine stays online for the
// whole hold, and the presence batch writes that time; once the host
// vanishes, it is offline 45 s later although the poll still waits.
func TestRule8_HeldPollOnlineOnlyAsOfItsConnectionsSignOfLife(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	d := h.desired("m-1")
	var heard atomic.Int64 // Unix nanoseconds of the connection's last sign of life
	heard.Store(h.clk.Now().UnixNano())
	ctx, cancel := context.WithCancel(WithSignOfLife(context.Background(), func() time.Time { return time.Unix(0, heard.Load()) }))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.Sync(ctx, "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: d.StoreID, Generation: d.Generation})
		done <- err
	}()
	waitTimers(t, h.clk, 1)
	// Alive for two minutes of the hold: a sign of life every 25 s.
	for range 5 {
		h.clk.Advance(25 * time.Second)
		heard.Store(h.clk.Now().UnixNano())
		if !h.online("m-1") {
			t.Fatalf("offline at %s into the hold while its connection answers", h.clk.Now().Sub(epoch))
		}
	}
	lastAlive := h.clk.Now()
	h.clk.Advance(5 * time.Second)
	if err := h.touch(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.machineRow("m-1").LastSync; !got.Equal(lastAlive.Truncate(time.Second)) {
		t.Errorf("the presence batch wrote last sync %s, want the connection's last sign of life %s", got, lastAlive)
	}
	// The host vanishes: nothing more is heard, the poll still waits.
	h.clk.Advance(39 * time.Second)
	if !h.online("m-1") {
		t.Fatal("offline 44 s after its last sign of life")
	}
	h.clk.Advance(time.Second)
	if h.online("m-1") {
		t.Error("online 45 s after its last sign of life: a held poll alone counted as contact")
	}
	select {
	case err := <-done:
		t.Fatalf("the poll ended (%v); the test needs it waiting", err)
	default:
	}
}
