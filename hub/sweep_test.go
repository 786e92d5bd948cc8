package hub

import (
	"testing"
	"time"
)

// The offline failure's reason says how long the machine was missed in
// words that hold for a shortened --offline-fail-after too.
func TestOfflineFailureSpellsItsSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * time.Minute: "10 minutes",
		time.Minute:      "1 minute",
		20 * time.Second: "20s",
		90 * time.Second: "1m30s",
	} {
		if got := spell(d); got != want {
			t.Errorf("spell(%s) = %q, want %q", d, got, want)
		}
	}
}
