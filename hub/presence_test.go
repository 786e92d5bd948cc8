package hub

import (
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
)

// TestPresenceEdges pins rule 8's thresholds at their edges: 45 s for
// online, 10 min for failing, the hub's start for both.
func TestPresenceEdges(t *testing.T) {
	clk := clock.NewFake(epoch)
	started := epoch.Add(-time.Hour)
	polling := map[string]bool{"m-poll": true}
	p := presence{clk: clk, offlineAfter: DefaultOfflineAfter, failAfter: DefaultOfflineFailAfter, started: started,
		connected: func(id string) bool { return polling[id] }}
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
