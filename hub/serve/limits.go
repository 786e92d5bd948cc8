package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"einsora.dev/edge/clock"
)

// Limits bound what callers can make the hub do. The hub serves three
// kinds of caller, and each has its own budgets, so that no kind can use up
// another's: unauthenticated peers (TLS without a client certificate:
// enrolment, renewal by token), enrolled machines (client certificate
// verified), and the admin API. Zero fields take the defaults;
// docs/operations.md lists them all and the flags that tune them.
type Limits struct {
	// Rate and Burst are each machine's token bucket: requests a second,
	// and how many may come at once. Over it, 429 with Retry-After.
	Rate  float64
	Burst int
	// EnrollRate and EnrollBurst are the bucket of each source (address,
	// or /64 for IPv6) for unauthenticated requests, which have no
	// machine to key on.
	EnrollRate  float64
	EnrollBurst int
	// MaxHandshakes is how many TLS handshakes may be in flight at once;
	// past it a ClientHello waits for a slot, first come first served,
	// before any costly cryptography, for up to HandshakeQueueWait; only
	// then is it refused, and the agent backs off with jitter. So a fleet
	// that connects at once is taken at the rate the hub's CPUs allow
	// instead of being refused and sent away to come back (issue 13).
	MaxHandshakes      int
	HandshakeQueueWait time.Duration
	// HandshakeTimeout is how long a peer has from its connection's
	// accept to its ClientHello, and from its handshake slot to the end of
	// its TLS handshake; then the connection closes and its slots are
	// free.
	HandshakeTimeout time.Duration
	// MaxUntrusted is how many connections may be open that no client
	// certificate vouches for yet (handshaking, or anonymous after it), in
	// all; past it the hub accepts no more until one is vouched for or
	// closed (those waiting stay in the kernel's accept queue), for up to
	// HandshakeTimeout a connection, then closes it. It also bounds the
	// table of sources.
	MaxUntrusted int
	// MaxUntrustedPerSource is the same, per source: an IPv4 address, or
	// an IPv6 /64, which one party usually holds whole.
	MaxUntrustedPerSource int
	// MaxActive is how many enrolled machines' requests the hub works on
	// at once, not counting long polls waiting (which cost nothing while
	// they wait). Past it a request waits for one to end, first come first
	// served, for up to QueueWait; at most MaxQueued wait at once. Only
	// then is it answered 503 with Retry-After: an agent sent away comes
	// back seconds later, while the hub could have served it sooner
	// (issue 13: a fleet that connects at once).
	MaxActive int
	MaxQueued int
	QueueWait time.Duration
	// MaxAnonActive is how many unauthenticated requests may be in
	// flight at once; past it, 503 with Retry-After.
	MaxAnonActive int
	// An unauthenticated request's body must arrive within BodyTimeoutMin
	// plus its declared length at BodyRate bytes a second, and never more
	// than BodyTimeoutMax: a peer that trickles its body frees its slot.
	BodyTimeoutMin time.Duration
	BodyRate       int
	BodyTimeoutMax time.Duration
	// MaxAdminActive is how many admin API requests may be in flight.
	MaxAdminActive int
	// After a wrong admin token a source must wait AdminFailDelay before
	// its next request, doubled for each further wrong one up to
	// AdminFailMax; a right token clears it. At most MaxAdminSources
	// sources are remembered.
	AdminFailDelay  time.Duration
	AdminFailMax    time.Duration
	MaxAdminSources int
	// RetryAfter is the least Retry-After of a 503; each answer adds up to
	// four times as much at random, so the callers shed do not return in
	// step.
	RetryAfter time.Duration
	// ReadHeaderTimeout bounds reading a request's header.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a connection that carried no request for that
	// long: an agent's connection always carries its next poll.
	IdleTimeout time.Duration
	// ReconnectRate is how many agents a second the hub plans to take
	// back after a restart or a drain: the reconnect window it tells
	// agents is its connected fleet over this rate, and never under
	// MinReconnectWindow. In the first StartPhase after the server starts
	// (none by default: docs/performance.md shows why),
	// machines' requests past this rate get 503 with a Retry-After at the
	// next free slot, so a fleet that returns at once is queued over the
	// window, after its handshake and never within it.
	ReconnectRate      float64
	MinReconnectWindow time.Duration
	StartPhase         time.Duration
}

// Defaults. The ones that scale with the CPUs are in withDefaults.
const (
	DefaultRate             = 5
	DefaultBurst            = 20
	DefaultEnrollRate       = 1
	DefaultEnrollBurst      = 10
	DefaultHandshakeTimeout = 2 * time.Second
	// Under the agent's own TLS handshake timeout (15 s), so a handshake
	// refused for waiting too long is one the agent still hears of.
	DefaultHandshakeQueueWait = 10 * time.Second
	DefaultMaxUntrusted       = 4096
	// A queued request is one whose connection, goroutine and header the
	// hub holds already; waiting adds little to them.
	DefaultMaxQueued = 16384
	// As long as a ClientHello may wait: a request that waited this long
	// finds the hub so far behind that a Retry-After says more.
	DefaultQueueWait             = 10 * time.Second
	DefaultMaxUntrustedPerSource = 64
	DefaultBodyTimeoutMin        = 3 * time.Second
	DefaultBodyRate              = 8 << 10
	DefaultBodyTimeoutMax        = 15 * time.Second
	DefaultMaxAdminActive        = 64
	DefaultAdminFailDelay        = time.Second
	DefaultAdminFailMax          = time.Minute
	DefaultMaxAdminSources       = 4096
	// maxBucketKeys bounds the token buckets kept, of machines and of
	// sources each.
	maxBucketKeys            = 1 << 16
	DefaultRetryAfter        = time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 90 * time.Second
	// Per CPU. An agent's return (a resumed TLS 1.3 handshake and its
	// first sync) costs about 1 ms of one core; at 750 a second on two
	// cores, with the fleet benchmark's 10,000 agents on the same two,
	// the hub took them all back within the window, one connection each,
	// and what came faster would wait its turn, not be refused
	// (docs/performance.md).
	DefaultReconnectRatePerCPU = 750
	DefaultMinReconnectWindow  = 3 * time.Second
	// No start queue by default: with it, the fleet benchmark's restart
	// took 13 s and 1.7 connections per agent; with the window alone, 3 s
	// and 1.00 (docs/performance.md).
	DefaultStartPhase time.Duration = 0
)

func orDefault[T int | float64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

func (l Limits) withDefaults(cpus int) Limits {
	orDefault(&l.Rate, DefaultRate)
	orDefault(&l.Burst, DefaultBurst)
	orDefault(&l.EnrollRate, DefaultEnrollRate)
	orDefault(&l.EnrollBurst, DefaultEnrollBurst)
	orDefault(&l.MaxHandshakes, 64*cpus)
	orDefault(&l.HandshakeTimeout, DefaultHandshakeTimeout)
	orDefault(&l.HandshakeQueueWait, DefaultHandshakeQueueWait)
	orDefault(&l.MaxUntrusted, DefaultMaxUntrusted)
	orDefault(&l.MaxUntrustedPerSource, DefaultMaxUntrustedPerSource)
	orDefault(&l.MaxActive, 256*cpus)
	orDefault(&l.MaxQueued, DefaultMaxQueued)
	orDefault(&l.QueueWait, DefaultQueueWait)
	orDefault(&l.MaxAnonActive, 32*cpus)
	orDefault(&l.BodyTimeoutMin, DefaultBodyTimeoutMin)
	orDefault(&l.BodyRate, DefaultBodyRate)
	orDefault(&l.BodyTimeoutMax, DefaultBodyTimeoutMax)
	orDefault(&l.MaxAdminActive, DefaultMaxAdminActive)
	orDefault(&l.AdminFailDelay, DefaultAdminFailDelay)
	orDefault(&l.AdminFailMax, DefaultAdminFailMax)
	orDefault(&l.MaxAdminSources, DefaultMaxAdminSources)
	orDefault(&l.RetryAfter, DefaultRetryAfter)
	orDefault(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	orDefault(&l.IdleTimeout, DefaultIdleTimeout)
	orDefault(&l.ReconnectRate, DefaultReconnectRatePerCPU*float64(cpus))
	orDefault(&l.MinReconnectWindow, DefaultMinReconnectWindow)
	orDefault(&l.StartPhase, DefaultStartPhase)
	return l
}

// activeSlots are enrolled machines' requests the hub works on at once
// (Limits.MaxActive). Past them a request waits in line for a slot: the
// senders on a channel are served in the order they came.
type activeSlots struct {
	sem       chan struct{}
	queued    atomic.Int64
	maxQueued int64
	wait      time.Duration
	clk       clock.Clock
	// released counts the slots given back. A request refused after its
	// whole wait sets rate (the bits of a float64, slots a second) to how
	// many were given back meanwhile: how fast the line moves now.
	released atomic.Int64
	rate     atomic.Uint64
}

func newActiveSlots(clk clock.Clock, n, maxQueued int, wait time.Duration) *activeSlots {
	return &activeSlots{sem: make(chan struct{}, n), maxQueued: int64(maxQueued), wait: wait, clk: clk}
}

// take returns a slot's release, which may be called more than once, or
// false when none freed within the wait, the line was full, or ctx ended.
func (a *activeSlots) take(ctx context.Context) (release func(), ok bool) {
	select {
	case a.sem <- struct{}{}:
		return a.releaser(), true
	default:
	}
	if a.queued.Add(1) > a.maxQueued {
		a.queued.Add(-1)
		return nil, false
	}
	defer a.queued.Add(-1)
	// Read before the timer is set: a waiter whose timer runs has its
	// starting count.
	before := a.released.Load()
	t := a.clk.NewTimer(a.wait)
	defer t.Stop()
	select {
	case a.sem <- struct{}{}:
		return a.releaser(), true
	case <-t.C():
		a.rate.Store(math.Float64bits(float64(a.released.Load()-before) / a.wait.Seconds()))
	case <-ctx.Done():
	}
	return nil, false
}

// drainTime is how long the line takes to be served at the rate it moved
// during the last whole wait that ended in a refusal; ok is false when
// none moved, or none has ended yet.
func (a *activeSlots) drainTime() (d time.Duration, ok bool) {
	rate := math.Float64frombits(a.rate.Load())
	if rate <= 0 {
		return 0, false
	}
	return time.Duration(float64(a.waiting()+1) / rate * float64(time.Second)), true
}

func (a *activeSlots) releaser() func() {
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			<-a.sem
			a.released.Add(1)
		}
	}
}

// inUse and waiting are the slots taken and the requests in line.
func (a *activeSlots) inUse() int   { return len(a.sem) }
func (a *activeSlots) waiting() int { return int(a.queued.Load()) }

// bodyTimeout is how long an unauthenticated request of n declared bytes
// (-1: unknown) may take to send its body.
func (l Limits) bodyTimeout(n int64) time.Duration {
	if n < 0 {
		return l.BodyTimeoutMax
	}
	d := l.BodyTimeoutMin + time.Duration(float64(n)/float64(l.BodyRate)*float64(time.Second))
	return min(d, l.BodyTimeoutMax)
}

// jittered is a Retry-After of at least base and up to five times it.
func jittered(base time.Duration) time.Duration { return retryWithin(base, 0, 0) }

// retryWithin is a Retry-After for a caller sent away from a line that
// takes drain to be served: at random from base to drain, but never
// narrower than jittered's span nor past limit (when limit is wider), so
// the callers sent away come back spread over the time the line needs,
// not in a crowd that meets it again (issue 13: replicas on an overloaded
// box sent a fleet away for 1 to 5 s while their lines took minutes).
func retryWithin(base, drain, limit time.Duration) time.Duration {
	span := max(min(drain, limit), 5*base)
	return base + rand.N(span-base+1)
}

// sourceKey is what per-source bounds key on: the IP address of addr
// (host:port), or its /64 for IPv6, since one party usually holds a whole
// /64 and could otherwise pass any per-address bound. IPv4 mapped into
// IPv6 counts as IPv4.
func sourceKey(addr string) string {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return addr
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return host
		}
		ap = netip.AddrPortFrom(ip, 0)
	}
	ip := ap.Addr().Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// sources counts what each source holds against a bound per source and
// one in all. An entry lives while its source holds something, so the
// table never has more entries than total.
type sources struct {
	perSource, total int

	// mu guards the following fields. freed is closed at the next
	// release, for acquireWithin; nil while nothing waits.
	mu    sync.Mutex
	m     map[string]int
	n     int
	freed chan struct{}
}

func newSources(perSource, total int) *sources {
	return &sources{perSource: perSource, total: total, m: make(map[string]int)}
}

// acquire takes one for key, unless key or all sources hold their bound;
// full says it was all of them.
func (s *sources) acquire(key string) (ok, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[key] >= s.perSource {
		return false, false
	}
	if s.n >= s.total {
		return false, true
	}
	s.m[key]++
	s.n++
	return true, false
}

// acquireWithin is acquire, waiting up to wait while all sources hold
// their bound, for one to release.
func (s *sources) acquireWithin(key string, wait time.Duration) bool {
	ok, full := s.acquire(key)
	if ok || !full {
		return ok
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		s.mu.Lock()
		if s.freed == nil {
			s.freed = make(chan struct{})
		}
		freed := s.freed
		s.mu.Unlock()
		if ok, full = s.acquire(key); ok || !full {
			return ok
		}
		select {
		case <-freed:
		case <-t.C:
			ok, _ = s.acquire(key)
			return ok
		}
	}
}

// release gives one of key's back, and wakes what waits for one.
func (s *sources) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[key] <= 1 {
		delete(s.m, key)
	} else {
		s.m[key]--
	}
	s.n--
	if s.freed != nil {
		close(s.freed)
		s.freed = nil
	}
}

func (s *sources) len() (entries, held int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m), s.n
}

// buckets is a token bucket per key. Full buckets are forgotten, so memory
// follows the keys active in the last few seconds.
type buckets struct {
	clk   clock.Clock
	rate  float64
	burst float64
	// max bounds the keys kept: past it, full buckets are swept at once,
	// and if none is full one key is forgotten (its bucket starts full
	// again), so many sources cost memory no more than max keys.
	max int

	// mu guards the following fields.
	mu    sync.Mutex
	m     map[string]*bucket
	swept time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newBuckets(clk clock.Clock, rate float64, burst, max int) *buckets {
	return &buckets{clk: clk, rate: rate, burst: float64(burst), max: max, m: make(map[string]*bucket)}
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
		if len(b.m) >= b.max {
			b.sweepLocked(now)
			for other := range b.m {
				if len(b.m) < b.max {
					break
				}
				delete(b.m, other)
			}
		}
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

// refund gives key back one token, up to the burst: for a request the
// hub, not the caller, made necessary.
func (b *buckets) refund(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k := b.m[key]; k != nil {
		k.tokens = math.Min(b.burst, k.tokens+1)
	}
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

// countingListener hands out conns that account for what they hold until
// a client certificate vouches for them: a handshake slot from the
// ClientHello to the handshake's end, and their source's share of
// untrusted connections from the accept to the handshake's end with a
// verified certificate (or to the close, for anonymous ones). A source
// over its share is closed at accept, before it costs a goroutine or a
// byte of TLS: nothing can be said to a peer that has not spoken TLS yet.
type countingListener struct {
	net.Listener
	slots     *handshakeSlots
	untrusted *sources
	timeout   time.Duration
	anonLife  time.Duration
	refused   *atomic.Int64
	now       func() time.Time
	// probeIdle is the listener's keepalive idle time (0: unknown).
	probeIdle time.Duration
}

// Accept accepts the next connection its source may hold. While every
// untrusted connection the hub allows is open, it waits (the peers behind
// stay in the kernel's accept queue) rather than close connections that
// would come back: those open end within HandshakeTimeout, or are vouched
// for sooner.
func (l *countingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := sourceKey(c.RemoteAddr().String())
		if !l.untrusted.acquireWithin(key, l.timeout) {
			l.refused.Add(1)
			c.Close()
			continue
		}
		boundUnacked(c, unackedFor)
		cc := &countedConn{Conn: c, slots: l.slots, sources: l.untrusted, key: key, timeout: l.timeout, anonLife: l.anonLife, now: l.now, probeIdle: l.probeIdle}
		cc.lastRead.Store(l.now().UnixNano())
		cc.phaseProbes()
		by := time.Now().Add(l.timeout)
		cc.handshakeBy.Store(by.UnixNano())
		cc.holdsSource.Store(true)
		c.SetDeadline(by)
		return cc, nil
	}
}

// handshakeSlots bounds the TLS handshakes in flight. A ClientHello past
// the bound waits for a slot, first come first served (a channel's
// senders queue in order), up to a bound. waitedAt (Unix nanoseconds, by
// now) is when a handshake last found them all taken.
type handshakeSlots struct {
	sem      chan struct{}
	now      func() time.Time
	waitedAt atomic.Int64
}

func newHandshakeSlots(n int, now func() time.Time) *handshakeSlots {
	return &handshakeSlots{sem: make(chan struct{}, max(n, 1)), now: now}
}

// take takes a slot, waiting up to wait for one.
func (h *handshakeSlots) take(wait time.Duration) bool {
	select {
	case h.sem <- struct{}{}:
		return true
	default:
	}
	h.waitedAt.Store(h.now().UnixNano())
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case h.sem <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

func (h *handshakeSlots) give() { <-h.sem }

// inFlight is how many slots are taken.
func (h *handshakeSlots) inFlight() int64 { return int64(len(h.sem)) }

type countedConn struct {
	net.Conn
	slots    *handshakeSlots
	inFlight atomic.Bool
	spoke    atomic.Bool
	// spokeOnce is set once the hub sent its handshake flight, and heard
	// when the peer answered it: a handshake that fails after that (a
	// certificate from another CA, expired) is refused with an alert.
	spokeOnce atomic.Bool
	heard     atomic.Bool
	// refused is set when VerifyConnection refused the peer.
	refused atomic.Bool

	sources     *sources
	key         string
	holdsSource atomic.Bool
	// handshakeBy (Unix nanoseconds) is when an unfinished handshake is
	// cut: every deadline set before the handshake ends is held to it
	// (the HTTP server sets its own, longer one); it moves to timeout
	// after the handshake slot is taken. handshook is set when it ended.
	handshakeBy atomic.Int64
	timeout     time.Duration
	handshook   atomic.Bool
	anonLife    time.Duration
	// served is set when an anonymous request came over the conn, and
	// idleBy (Unix nanoseconds) is when an anonymous conn is cut: the end
	// of its life, or a second after it went idle once served.
	served atomic.Bool
	idleBy atomic.Int64
	// lastRead (Unix nanoseconds, by now) is when a byte last came.
	lastRead atomic.Int64
	now      func() time.Time
	// ackedAt (Unix nanoseconds, by now; 0: never asked) is the peer's
	// last acknowledgement as the kernel last told it, and kernelAsks
	// counts the asking. probeIdle is the listener's keepalive idle
	// time (0: unknown, and the kernel is asked every time).
	ackedAt    atomic.Int64
	kernelAsks atomic.Int64
	probeIdle  time.Duration
	// rephaseAt (Unix nanoseconds, by now; 0: done or never) is when the
	// keepalive idle time goes back to probeIdle (phaseProbes).
	rephaseAt atomic.Int64
	// checkedAt (Unix nanoseconds, by now; 0: none) is when the
	// handshake had the store's word on the peer's certificate, until a
	// request takes it.
	checkedAt atomic.Int64
}

// checked notes that the handshake's certificate check passed now.
func (c *countedConn) checked() { c.checkedAt.Store(c.now().UnixNano()) }

// checkedWithin takes the handshake's check, once: true when it passed
// less than d ago.
func (c *countedConn) checkedWithin(d time.Duration) bool {
	at := c.checkedAt.Swap(0)
	return at != 0 && at > c.now().Add(-d).UnixNano()
}

// anonLinger is how long an anonymous connection may stay open once it is
// idle after a request: an enrolment or renewal by token is one request,
// and an idle anonymous connection would hold its source's share.
const anonLinger = time.Second

// idle cuts an anonymous connection that served its request and now
// waits: its next read ends within anonLinger.
func (c *countedConn) idle() {
	by := time.Now().Add(anonLinger)
	if n := c.idleBy.Load(); n != 0 && n < by.UnixNano() {
		by = time.Unix(0, n)
	}
	c.idleBy.Store(by.UnixNano())
	c.Conn.SetReadDeadline(by)
}

// begin takes a handshake slot, waiting up to wait for one; the
// handshake then has the connection's timeout to end.
func (c *countedConn) begin(wait time.Duration) bool {
	if !c.slots.take(wait) {
		return false
	}
	c.inFlight.Store(true)
	by := time.Now().Add(c.timeout)
	c.handshakeBy.Store(by.UnixNano())
	c.Conn.SetDeadline(by)
	return true
}

// Write notes that the hub has spoken: once its handshake flight is out,
// the next read waits on the peer.
func (c *countedConn) Write(b []byte) (int, error) {
	if c.inFlight.Load() {
		c.spoke.Store(true)
		c.spokeOnce.Store(true)
	}
	return c.Conn.Write(b)
}

// Read gives the handshake slot back when the hub waits on the peer after
// its own flight: the slot bounds the hub's cryptography in flight, and a
// silent peer costs none of it. What waits is bounded per source, in all
// and by the handshake deadline.
func (c *countedConn) Read(b []byte) (int, error) {
	if c.spoke.Load() && c.end() {
		c.peersTurn()
	}
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.lastRead.Store(c.now().UnixNano())
		if c.spokeOnce.Load() && !c.handshook.Load() {
			c.heard.Store(true)
		}
	}
	return n, err
}

// signOfLife is when the peer last showed itself alive: the last byte
// read, or its kernel's last acknowledgement (keepalive answers too),
// whichever is later. The kernel probes only after probeIdle without a
// word from the peer, so until then an idle peer's last acknowledgement
// is the one the kernel last told: every presence batch asks for every
// held poll, and this halves the asking. What the peer acknowledges of
// the hub's own writes in that time is heard at the next asking, at most
// probeIdle late and never early.
func (c *countedConn) signOfLife() time.Time {
	read, acked := c.lastRead.Load(), c.ackedAt.Load()
	now := c.now()
	if at := c.rephaseAt.Load(); at != 0 && now.UnixNano() >= at && c.rephaseAt.CompareAndSwap(at, 0) {
		setKeepAliveIdle(c.Conn, c.probeIdle)
	}
	if acked == 0 || c.probeIdle <= 0 || now.Sub(time.Unix(0, max(read, acked))) >= c.probeIdle {
		c.kernelAsks.Add(1)
		if ago, ok := sinceLastAck(c.Conn); ok {
			acked = now.Add(-ago).UnixNano()
			c.ackedAt.Store(acked)
		}
	}
	return time.Unix(0, max(read, acked))
}

// phaseProbes gives the connection's first keepalive probe a random time
// between half the listener's idle time and all of it (in whole seconds,
// as the kernel takes it), and sets when the idle time goes back to the
// listener's (rephaseAt, done by signOfLife, a second after the first
// probe: time for its answer). The kernel's
// timer wheel fires timers this long in slots (2 s at 250 Hz);
// connections accepted together (a fleet coming back after a restart)
// would otherwise probe together for as long as they are idle, and on
// loopback or a veth a burst of more probes than a CPU's input backlog
// holds (1,000 by default) loses the rest: retried together, lost
// together, the connections were cut (issue 13, docs/performance.md).
// Each connection keeps the phase its first answer gave it: one probe
// more in its life. One that never holds a poll (signOfLife is asked for
// held polls) keeps the shorter idle time, for the short life such
// connections have.
func (c *countedConn) phaseProbes() {
	if c.probeIdle < 2*time.Second {
		return
	}
	half := c.probeIdle / 2
	first := (half + rand.N(c.probeIdle-half)).Truncate(time.Second)
	if setKeepAliveIdle(c.Conn, first) != nil {
		return
	}
	c.rephaseAt.Store(c.now().Add(first + time.Second).UnixNano())
}

// setKeepAliveIdle sets how long c is idle before its first keepalive
// probe, leaving the interval and count as they were.
func setKeepAliveIdle(c net.Conn, idle time.Duration) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return errors.ErrUnsupported
	}
	return tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: idle, Interval: -1, Count: -1})
}

// end gives the slot back, once; it reports whether it did.
func (c *countedConn) end() bool {
	if !c.inFlight.CompareAndSwap(true, false) {
		return false
	}
	c.slots.give()
	c.spoke.Store(false)
	return true
}

// peersTurn gives an unfinished handshake the connection's timeout from
// now: the hub has written its flight, or checked the peer's, and waits
// on the peer. The deadline bounds the peer's time, never the hub's: with
// it counted from the handshake slot, a hub slow to answer (its CPUs
// taken by a fleet connecting at once, its store by their first syncs)
// cut the handshakes it was slow on, and their agents came back again and
// again (issue 13).
func (c *countedConn) peersTurn() {
	if c.handshook.Load() {
		return
	}
	by := time.Now().Add(c.timeout)
	c.handshakeBy.Store(by.UnixNano())
	c.Conn.SetDeadline(by)
}

// vouched ends the handshake; with a verified client certificate the
// conn no longer counts against its source. Without one it may live
// anonLife at most, however it is used.
func (c *countedConn) vouched(withCert bool) {
	if withCert {
		c.handshook.Store(true)
		c.releaseSource()
		return
	}
	c.idleBy.Store(time.Now().Add(c.anonLife).UnixNano())
	c.handshook.Store(true)
}

func (c *countedConn) releaseSource() {
	if c.holdsSource.CompareAndSwap(true, false) {
		c.sources.release(c.key)
	}
}

func (c *countedConn) clamp(t time.Time) time.Time {
	by := time.Unix(0, c.handshakeBy.Load())
	if c.handshook.Load() {
		n := c.idleBy.Load()
		if n == 0 {
			return t
		}
		by = time.Unix(0, n)
	}
	if t.IsZero() || t.After(by) {
		return by
	}
	return t
}

// countedOf is the countedConn under a server-side conn, if any.
func countedOf(c net.Conn) *countedConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	cc, _ := c.(*countedConn)
	return cc
}

func (c *countedConn) SetDeadline(t time.Time) error     { return c.Conn.SetDeadline(c.clamp(t)) }
func (c *countedConn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(c.clamp(t)) }
func (c *countedConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.clamp(t))
}

// lingerRefused is how long a refused connection is drained before it is
// closed.
const lingerRefused = time.Second

// Close closes the conn. After a refused handshake it first half-closes and
// reads what the agent already sent, for up to a second: closing with
// unread data would reset the connection, and the reset can overtake the
// TLS alert that tells the agent why it was refused. A peer that never
// answered the hub's flight gets no such courtesy: it is cut.
func (c *countedConn) Close() error {
	if c.inFlight.Load() || c.refused.Load() || (c.heard.Load() && !c.handshook.Load()) {
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			tc.CloseWrite()
			tc.SetReadDeadline(time.Now().Add(lingerRefused))
			io.Copy(io.Discard, io.LimitReader(tc, 64<<10))
		}
	}
	c.end()
	c.releaseSource()
	return c.Conn.Close()
}
