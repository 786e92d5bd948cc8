package serve

import (
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"einsora.dev/edge/clock"
)

// Limits bound what agents can make the hub do. Zero fields take the
// defaults.
type Limits struct {
	// Rate and Burst are each machine's token bucket: requests a second,
	// and how many may come at once. Over it, 429 with Retry-After.
	Rate  float64
	Burst int
	// EnrollRate and EnrollBurst are the bucket of each remote address on
	// the enrolment endpoint, which has no machine to key on.
	EnrollRate  float64
	EnrollBurst int
	// MaxHandshakes is how many TLS handshakes may be in flight at once;
	// past it a new connection is refused at its ClientHello, before any
	// costly cryptography, and the agent backs off with jitter.
	MaxHandshakes int
	// MaxActive is how many requests may be in flight at once, not
	// counting long polls waiting (which cost nothing while they wait);
	// past it, 503 with Retry-After.
	MaxActive int
	// RetryAfter is the least Retry-After of a 503; each answer adds up to
	// as much again at random, so the agents shed do not return in step.
	RetryAfter time.Duration
	// ReadHeaderTimeout bounds reading a request's header.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a connection that carried no request for that
	// long: an agent's connection always carries its next poll.
	IdleTimeout time.Duration
}

// Defaults.
const (
	DefaultRate              = 5
	DefaultBurst             = 20
	DefaultEnrollRate        = 1
	DefaultEnrollBurst       = 10
	DefaultRetryAfter        = time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 90 * time.Second
)

func (l Limits) withDefaults(cpus int) Limits {
	if l.Rate <= 0 {
		l.Rate = DefaultRate
	}
	if l.Burst <= 0 {
		l.Burst = DefaultBurst
	}
	if l.EnrollRate <= 0 {
		l.EnrollRate = DefaultEnrollRate
	}
	if l.EnrollBurst <= 0 {
		l.EnrollBurst = DefaultEnrollBurst
	}
	if l.MaxHandshakes <= 0 {
		l.MaxHandshakes = 64 * cpus
	}
	if l.MaxActive <= 0 {
		l.MaxActive = 256 * cpus
	}
	if l.RetryAfter <= 0 {
		l.RetryAfter = DefaultRetryAfter
	}
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	return l
}

// buckets is a token bucket per key. Full buckets are forgotten, so memory
// follows the keys active in the last few seconds.
type buckets struct {
	clk   clock.Clock
	rate  float64
	burst float64

	// mu guards the following fields.
	mu    sync.Mutex
	m     map[string]*bucket
	swept time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newBuckets(clk clock.Clock, rate float64, burst int) *buckets {
	return &buckets{clk: clk, rate: rate, burst: float64(burst), m: make(map[string]*bucket)}
}

// take takes a token of key's bucket, or says how long until one is there.
func (b *buckets) take(key string) (ok bool, wait time.Duration) {
	now := b.clk.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.swept) > time.Minute {
		b.sweepLocked(now)
	}
	k := b.m[key]
	if k == nil {
		k = &bucket{tokens: b.burst, at: now}
		b.m[key] = k
	}
	k.tokens = math.Min(b.burst, k.tokens+now.Sub(k.at).Seconds()*b.rate)
	k.at = now
	if k.tokens >= 1 {
		k.tokens--
		return true, 0
	}
	return false, time.Duration((1 - k.tokens) / b.rate * float64(time.Second))
}

func (b *buckets) sweepLocked(now time.Time) {
	b.swept = now
	for key, k := range b.m {
		if k.tokens+now.Sub(k.at).Seconds()*b.rate >= b.burst {
			delete(b.m, key)
		}
	}
}

// retryAfterHeader writes d as whole seconds, at least one.
func retryAfterHeader(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(max(d, time.Second).Seconds())), 10))
}

// countingListener hands out conns that account for their TLS handshake:
// the slot taken at the ClientHello is given back when the handshake is
// verified or the conn closes, whichever comes first.
type countingListener struct {
	net.Listener
	handshakes *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, handshakes: l.handshakes}, nil
}

type countedConn struct {
	net.Conn
	handshakes *atomic.Int64
	inFlight   atomic.Bool
	// refused is set when VerifyConnection refused the peer.
	refused atomic.Bool
}

// begin takes a handshake slot unless max are taken.
func (c *countedConn) begin(limit int) bool {
	if c.handshakes.Add(1) > int64(limit) {
		c.handshakes.Add(-1)
		return false
	}
	c.inFlight.Store(true)
	return true
}

// end gives the slot back, once.
func (c *countedConn) end() {
	if c.inFlight.CompareAndSwap(true, false) {
		c.handshakes.Add(-1)
	}
}

// lingerRefused is how long a refused connection is drained before it is
// closed.
const lingerRefused = time.Second

// Close closes the conn. After a refused handshake it first half-closes and
// reads what the agent already sent, for up to a second: closing with
// unread data would reset the connection, and the reset can overtake the
// TLS alert that tells the agent why it was refused.
func (c *countedConn) Close() error {
	if c.inFlight.Load() || c.refused.Load() {
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			tc.CloseWrite()
			tc.SetReadDeadline(time.Now().Add(lingerRefused))
			io.Copy(io.Discard, io.LimitReader(tc, 64<<10))
		}
	}
	c.end()
	return c.Conn.Close()
}
