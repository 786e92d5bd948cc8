package hubclient

import (
	"math/rand/v2"
	"time"

	"einsora.dev/edge/protocol"
)

// Backoff computes reconnect waits with full jitter:
// wait = random(0, min(Cap, Base × 2^attempt)). Jitter over the whole range
// keeps a fleet from redialling a restarted hub in step, which would turn
// one restart into a storm of TLS handshakes. Reset after a successful sync.
type Backoff struct {
	Base time.Duration
	Cap  time.Duration
	// Rand returns a value in [0, n); nil means math/rand/v2.
	Rand func(n int64) int64
	// Window is the hub's reconnect window, from its last answer
	// (protocol.SyncResponse.ReconnectWindowMS): the first wait after a
	// success is drawn from all of it (up to Cap), so that a fleet that
	// lost its hub at one instant returns spread over what the hub sized
	// for it, each agent once, not in a storm.
	Window  time.Duration
	attempt int
}

// WindowOf is the reconnect window of a hub's answer.
func WindowOf(resp *protocol.SyncResponse) time.Duration {
	if resp == nil || resp.ReconnectWindowMS <= 0 {
		return 0
	}
	return time.Duration(min(resp.ReconnectWindowMS, int64(time.Hour/time.Millisecond))) * time.Millisecond
}

// Default backoff of reconnects.
const (
	DefaultBackoffBase = time.Second
	DefaultBackoffCap  = 60 * time.Second
)

// Next returns the wait before the next try and counts the attempt.
func (b *Backoff) Next() time.Duration {
	base, limit := b.Base, b.Cap
	if base <= 0 {
		base = DefaultBackoffBase
	}
	if limit <= 0 {
		limit = DefaultBackoffCap
	}
	ceiling := limit
	// Shift only while it cannot overflow and stays under the cap.
	if b.attempt < 62 && base<<b.attempt > 0 && base<<b.attempt < limit {
		ceiling = base << b.attempt
	}
	if b.attempt == 0 && b.Window > ceiling {
		ceiling = min(b.Window, limit)
	}
	b.attempt++
	rnd := b.Rand
	if rnd == nil {
		rnd = rand.Int64N
	}
	return time.Duration(rnd(int64(ceiling) + 1))
}

// Reset starts the sequence again, after a sync succeeded.
func (b *Backoff) Reset() { b.attempt = 0 }

// Attempt is the number of waits handed out since the last Reset.
func (b *Backoff) Attempt() int { return b.attempt }
