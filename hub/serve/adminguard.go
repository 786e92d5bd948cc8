package serve

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"einsora.dev/edge/clock"
)

// guardAdmin wraps the admin API in its own budget of requests in flight
// (MaxAdminActive), and holds back each source that sent a wrong token:
// AdminFailDelay after the first, doubling up to AdminFailMax, until a
// right one clears it. A held-back source is answered 429 whatever token
// it sends, so guessing costs the guesser time.
func guardAdmin(next http.Handler, lim Limits, clk clock.Clock) http.Handler {
	return &adminGuard{next: next, max: int64(lim.MaxAdminActive), retry: lim.RetryAfter,
		fails: newThrottle(clk, lim.AdminFailDelay, lim.AdminFailMax, lim.MaxAdminSources)}
}

type adminGuard struct {
	next   http.Handler
	max    int64
	retry  time.Duration
	fails  *throttle
	active atomic.Int64
}

func (g *adminGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := sourceKey(r.RemoteAddr)
	if d := g.fails.wait(key); d > 0 {
		retryAfterHeader(w, d)
		writeError(w, http.StatusTooManyRequests, "too many wrong admin tokens from this address; try again after Retry-After")
		return
	}
	n := g.active.Add(1)
	defer g.active.Add(-1)
	if n > g.max {
		retryAfterHeader(w, jittered(g.retry))
		writeError(w, http.StatusServiceUnavailable, "the admin API is busy; try again after Retry-After")
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	g.next.ServeHTTP(sw, r)
	// The admin handler answers 401 only to a missing or wrong token.
	if sw.code == http.StatusUnauthorized {
		g.fails.fail(key)
	} else {
		g.fails.clear(key)
	}
}

// throttle remembers each source's failures, at most size sources: when
// full, it forgets the source whose hold ended first.
type throttle struct {
	clk       clock.Clock
	base, max time.Duration
	size      int

	// mu guards the following field.
	mu sync.Mutex
	m  map[string]*strikes
}

type strikes struct {
	n     int
	until time.Time
}

func newThrottle(clk clock.Clock, base, max time.Duration, size int) *throttle {
	return &throttle{clk: clk, base: base, max: max, size: size, m: make(map[string]*strikes)}
}

// wait is how long key is still held back.
func (t *throttle) wait(key string) time.Duration {
	now := t.clk.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.m[key]; s != nil && s.until.After(now) {
		return s.until.Sub(now)
	}
	return 0
}

// fail holds key back for twice as long as last time.
func (t *throttle) fail(key string) {
	now := t.clk.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[key]
	if s == nil {
		if len(t.m) >= t.size {
			t.evictLocked()
		}
		s = &strikes{}
		t.m[key] = s
	}
	s.n++
	d := t.base
	for i := 1; i < s.n && d < t.max; i++ {
		d *= 2
	}
	s.until = now.Add(min(d, t.max))
}

func (t *throttle) clear(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, key)
}

func (t *throttle) evictLocked() {
	var oldest string
	var at time.Time
	for k, s := range t.m {
		if oldest == "" || s.until.Before(at) {
			oldest, at = k, s.until
		}
	}
	delete(t.m, oldest)
}

func (t *throttle) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
