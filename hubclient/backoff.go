package hubclient

import (
	"math/rand/v2"
	"time"
)

// Backoff computes reconnect waits with full jitter:
// wait = random(0, min(Cap, Base × 2^attempt)). Jitter over the whole range
// keeps a fleet from redialling a restarted hub in step, which would turn
// one restart into a storm of TLS handshakes. Reset after a successful sync.
type Backoff struct {
	Base time.Duration
	Cap  time.Duration
	// Rand returns a value in [0, n); nil means math/rand/v2.
	Rand    func(n int64) int64
	attempt int
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
