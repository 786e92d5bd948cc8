package serve_test

import (
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/serve"
)

// Rule 8 across replicas: a held poll's sign of life (the keepalive the
// hub's kernel has answered) is carried to the store by the next presence
// batch, rounded down to the second, and the other replicas read it there.
// For every offline rule Run takes, the keepalive idle time (whole seconds,
// as the kernel takes it), a batch interval, the second of rounding and a
// second for the kernel's timers and the batch's commit fit in the rule: a
// machine whose connection answers never looks offline to the leader.
func TestRule8_HeldPollsSignOfLifeReachesTheStoreWithinTheRule(t *testing.T) {
	for _, rule := range []time.Duration{serve.MinOfflineAfter, 6 * time.Second, 7500 * time.Millisecond,
		10 * time.Second, 15 * time.Second, 20 * time.Second, 45 * time.Second, 90 * time.Second, 10 * time.Minute} {
		idle := serve.KeepAliveIdleFor(rule)
		if idle != idle.Truncate(time.Second) || idle < time.Second {
			t.Errorf("--offline-after %s: keepalive idle %s, want whole seconds, at least one", rule, idle)
		}
		const rounding, slack = time.Second, time.Second
		if worst := idle + hub.PresenceEvery(rule) + rounding + slack; worst > rule {
			t.Errorf("--offline-after %s: keepalive idle %s + batch interval %s + %s: %s in the store, past the rule",
				rule, idle, hub.PresenceEvery(rule), rounding+slack, worst)
		}
	}
	// The default's idle time is the one the idle-traffic figures rest on
	// (docs/performance.md).
	for _, rule := range []time.Duration{0, hub.DefaultOfflineAfter} {
		if got := serve.KeepAliveIdleFor(rule); got != serve.KeepAliveIdle {
			t.Errorf("--offline-after %s: keepalive idle %s, want %s", rule, got, serve.KeepAliveIdle)
		}
	}
}
