package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
)

func TestBucketsRefillAndForget(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	b := newBuckets(clk, 5, 20, 100)
	for i := range 20 {
		if ok, _ := b.take("m-1"); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	ok, wait := b.take("m-1")
	if ok || wait <= 0 || wait > 200*time.Millisecond {
		t.Fatalf("21st request: ok %v, wait %s; want refused for at most 1/5 s", ok, wait)
	}
	if ok, _ := b.take("m-2"); !ok {
		t.Error("another machine's request refused")
	}
	clk.Advance(200 * time.Millisecond)
	if ok, _ := b.take("m-1"); !ok {
		t.Error("not refilled after 1/5 s")
	}
	clk.Advance(time.Hour)
	b.take("m-3")
	b.mu.Lock()
	n := len(b.m)
	b.mu.Unlock()
	if n != 1 {
		t.Errorf("%d buckets kept after an idle hour, want only the one just used", n)
	}
}

func testServer(t *testing.T, lim Limits) *Server {
	t.Helper()
	s, _ := testServerOf(t, lim, hub.Config{}, clock.Real{})
	return s
}

// testServerOf is testServer over a hub of hcfg (its store, CA and logger
// made here) and clk, with the store.
func testServerOf(t *testing.T, lim Limits, hcfg hub.Config, clk clock.Clock) (*Server, store.Store) {
	t.Helper()
	_, authority, st := NewCAAndStore(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hcfg.AllowSim, hcfg.Store, hcfg.CA, hcfg.Logger, hcfg.Clock = true, st, authority, log, clk
	h, err := hub.New(context.Background(), hcfg)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := authority.ServerCertificate([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return NewServer(Config{Hub: h, CA: authority, Certificate: cert, Logger: log, Limits: lim, Clock: clk}), st
}

// Past MaxActive busy requests of machines (and a full line behind them),
// or MaxAnonActive of callers without a certificate, the hub answers 503
// with a jittered Retry-After; each kind has its own budget.
func TestShedsLoadWith503(t *testing.T) {
	s := testServer(t, Limits{MaxActive: 2, MaxQueued: 1, QueueWait: time.Millisecond, MaxAnonActive: 3, RetryAfter: time.Second})
	h := s.srv.Handler
	machine := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/agent/v1/sync", nil)
		r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{}}}}
		return r
	}
	anon := func() *http.Request { return httptest.NewRequest(http.MethodPost, "/agent/v1/sync", nil) }
	var taken []func()
	fillMachines := func(full bool) {
		for _, release := range taken {
			release()
		}
		taken = nil
		for full && s.active.inUse() < 2 {
			release, _ := s.active.take(context.Background())
			taken = append(taken, release)
		}
	}
	fillAnon := func(full bool) {
		s.anonymous.Store(0)
		if full {
			s.anonymous.Store(3)
		}
	}
	for _, tc := range []struct {
		name          string
		req           func() *http.Request
		fill, another func(full bool)
	}{
		{"machine", machine, fillMachines, fillAnon},
		{"anonymous", anon, fillAnon, fillMachines},
	} {
		// Another kind's full budget does not hold this one back.
		tc.another(true)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, tc.req())
		if w.Code == http.StatusServiceUnavailable {
			t.Errorf("%s: 503 while only another kind's budget is full", tc.name)
		}
		tc.another(false)
		tc.fill(true)
		w = httptest.NewRecorder()
		h.ServeHTTP(w, tc.req())
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s: got %d, want 503", tc.name, w.Code)
		}
		// A machine sent away is load the hub tells other replicas of
		// (TestBusyReplicaPublishesNoCount); a caller without a
		// certificate is not, or it could keep agents from a replica.
		if busy := s.busyNow(); busy != (tc.name == "machine") {
			t.Errorf("%s: busy %v after its 503", tc.name, busy)
		}
		s.shedAt.Store(0)
		// A machine's line that did not move in its wait sends it away
		// for up to a third of OfflineAfter (TestRetryAfterSpreadsOverTheLine).
		most := map[string]int{"machine": 15, "anonymous": 5}[tc.name]
		ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
		if err != nil || ra < 1 || ra > most {
			t.Errorf("%s: Retry-After %q, want 1 to %d seconds", tc.name, w.Header().Get("Retry-After"), most)
		}
		tc.fill(false)
	}
}

// Issue 13: past MaxActive a machine's request waits in line for a slot
// instead of being sent away, and is served once one frees within
// QueueWait; past MaxQueued in line, it is answered 503 at once.
func TestQueuesMachinesPastMaxActive(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a := newActiveSlots(clk, 1, 1, time.Minute)
	first, ok := a.take(context.Background())
	if !ok {
		t.Fatal("the first request found no slot")
	}
	got := make(chan bool, 1)
	go func() {
		release, ok := a.take(context.Background())
		if ok {
			release()
		}
		got <- ok
	}()
	waitGauge(t, "the second request never queued", func() bool { return a.waiting() == 1 })
	// The line is full: a third is refused at once.
	if _, ok := a.take(context.Background()); ok {
		t.Fatal("a request past MaxQueued was given a slot")
	}
	first()
	first() // a second release gives back nothing more
	if !<-got {
		t.Fatal("the request in line was refused when a slot freed")
	}
	if a.inUse() != 0 {
		t.Fatalf("%d slots in use after both released, want 0", a.inUse())
	}
	// Nothing frees within QueueWait: refused after it.
	first, _ = a.take(context.Background())
	go func() { _, ok := a.take(context.Background()); got <- ok }()
	waitGauge(t, "no request waiting", func() bool { return a.waiting() == 1 && clk.Timers() == 1 })
	clk.Advance(time.Minute)
	if <-got {
		t.Fatal("a request was given a slot that never freed")
	}
	first()
}

// serveLoopback serves s on a loopback port until the test ends, and
// returns the listener and a client configuration that trusts it.
func serveLoopback(t *testing.T, s *Server) (net.Listener, *tls.Config) {
	t.Helper()
	ln, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Serve(ln); close(done) }()
	t.Cleanup(func() { s.Close(); <-done })
	return ln, &tls.Config{RootCAs: s.ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
}

// Past MaxHandshakes a ClientHello waits for a slot (issue 13: a fleet
// that connects at once is queued, not refused): it is served once a slot
// frees within HandshakeQueueWait, and refused only when none does.
func TestQueuesHandshakesPastTheLimit(t *testing.T) {
	s := testServer(t, Limits{MaxHandshakes: 1, HandshakeQueueWait: 500 * time.Millisecond})
	ln, cfg := serveLoopback(t, s)
	dial := func() (time.Duration, error) {
		start := time.Now()
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err == nil {
			c.Close()
		}
		return time.Since(start), err
	}

	s.handshakes.take(0) // a handshake in flight holds the only slot
	freed := time.AfterFunc(200*time.Millisecond, s.handshakes.give)
	defer freed.Stop()
	took, err := dial()
	if err != nil {
		t.Fatalf("a handshake waiting for a slot that freed in time was refused: %v", err)
	}
	if took < 150*time.Millisecond {
		t.Errorf("handshake done in %s, before the only slot freed", took)
	}
	waitGauge(t, "handshake slot not given back", func() bool { return s.Stats().Handshakes == 0 })

	s.handshakes.take(0) // held past the wait this time
	if _, err := dial(); err == nil {
		t.Fatal("handshake accepted past the limit with no slot freed")
	}
	s.handshakes.give()
	if _, err := dial(); err != nil {
		t.Fatalf("handshake refused under the limit: %v", err)
	}
	waitGauge(t, "handshake slot not given back", func() bool { return s.Stats().Handshakes == 0 })
}

// Past MaxUntrusted the hub stops accepting until a connection is vouched
// for or closed, instead of closing the ones that come: a connection
// accepted while every untrusted slot is held is served once one frees.
func TestWaitsForAnUntrustedSlotPastTheLimit(t *testing.T) {
	s := testServer(t, Limits{MaxUntrusted: 1})
	ln, cfg := serveLoopback(t, s)

	silent, err := net.Dial("tcp", ln.Addr().String()) // holds the only slot, says nothing
	if err != nil {
		t.Fatal(err)
	}
	waitGauge(t, "handshake slot not given back", func() bool { _, held := s.untrusted.len(); return held == 1 })
	time.AfterFunc(200*time.Millisecond, func() { silent.Close() })
	start := time.Now()
	c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
	if err != nil {
		t.Fatalf("a connection that came while the only untrusted slot was held was refused: %v", err)
	}
	c.Close()
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("served in %s, before the only slot freed", took)
	}
	if n := s.refused.Load(); n != 0 {
		t.Errorf("%d connections closed at accept, want none", n)
	}
}

func waitGauge(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCertNames(t *testing.T) {
	ln, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	names := certNames([]string{"hub.example.com", " ", "hub.example.com"}, ln)
	if names[0] != "hub.example.com" || names[1] != "127.0.0.1" {
		t.Errorf("got %v", names)
	}
	seen := map[string]int{}
	for _, n := range names {
		seen[n]++
	}
	if seen["hub.example.com"] != 1 || seen["localhost"] != 1 || seen[""] != 0 {
		t.Errorf("got %v", names)
	}
	if got := agentURL(ln, names); got != "https://"+ln.Addr().String() {
		t.Errorf("agent URL %s", got)
	}
}

// The buckets keep at most their bound of keys, however many sources
// come within a minute.
func TestBucketsAreBounded(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	b := newBuckets(clk, 1, 10, 50)
	for i := range 1000 {
		b.take(strconv.Itoa(i))
		b.take(strconv.Itoa(i)) // not full, so not swept
	}
	b.mu.Lock()
	n := len(b.m)
	b.mu.Unlock()
	if n > 50 {
		t.Fatalf("%d keys kept, want at most 50", n)
	}
}

// Per-source bounds key on the address for IPv4 and on the /64 for IPv6,
// so one party holding a /64 counts once.
func TestSourceKey(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"192.0.2.7:443", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:443", "192.0.2.7"},
		{"[2001:db8:1:2:aaaa::1]:5000", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:1", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:1", "2001:db8:1:3::/64"},
		{"[fe80::1%eth0]:1", "fe80::/64"},
		{"not an address", "not an address"},
	} {
		if got := sourceKey(tc.addr); got != tc.want {
			t.Errorf("sourceKey(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// The table of sources never holds more than its total, however many
// sources try, and each source is held to its share.
func TestSourcesTableIsBounded(t *testing.T) {
	s := newSources(2, 5)
	took := 0
	for i := range 1000 {
		if ok, _ := s.acquire(strconv.Itoa(i % 500)); ok {
			took++
		}
	}
	if n, held := s.len(); took != 5 || n > 5 || held != 5 {
		t.Fatalf("took %d, table of %d entries holding %d; want 5 of at most 5", took, n, held)
	}
	s = newSources(2, 100)
	for range 3 {
		s.acquire("a")
	}
	if _, held := s.len(); held != 2 {
		t.Errorf("one source holds %d, want its share of 2", held)
	}
	s.release("a")
	s.release("a")
	if n, held := s.len(); n != 0 || held != 0 {
		t.Errorf("after release: %d entries holding %d, want none", n, held)
	}
}

// An unauthenticated body's deadline grows with its declared size, from a
// floor to a cap.
func TestBodyTimeout(t *testing.T) {
	l := Limits{}.withDefaults(1)
	if got := l.bodyTimeout(0); got != DefaultBodyTimeoutMin {
		t.Errorf("empty body: %s", got)
	}
	if got := l.bodyTimeout(16 << 10); got != DefaultBodyTimeoutMin+2*time.Second {
		t.Errorf("16 KiB: %s, want the floor plus 2 s at 8 KiB/s", got)
	}
	if got := l.bodyTimeout(1 << 30); got != DefaultBodyTimeoutMax {
		t.Errorf("1 GiB: %s, want the cap", got)
	}
	if got := l.bodyTimeout(-1); got != DefaultBodyTimeoutMax {
		t.Errorf("unknown length: %s, want the cap", got)
	}
}

// Issue 13: a request refused after its whole wait measures how fast the
// line moved meanwhile; the line is then expected to drain at that rate.
func TestLineDrainTimeIsMeasuredByTheLastWait(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a := newActiveSlots(clk, 1, 10, 10*time.Second)
	if _, ok := a.drainTime(); ok {
		t.Fatal("a drain time before any wait ended")
	}
	first, _ := a.take(context.Background())
	got := make(chan bool, 1)
	go func() { _, ok := a.take(context.Background()); got <- ok }()
	// Its timer set, its wait has begun.
	waitGauge(t, "no request waiting", func() bool { return a.waiting() == 1 && clk.Timers() == 1 })
	// 30 slots given back elsewhere while it waited, none to it.
	a.released.Add(30)
	clk.Advance(10 * time.Second)
	if <-got {
		t.Fatal("given a slot that never freed")
	}
	// 3 a second: the line, with 5 more in it, needs 2 s.
	a.queued.Add(5)
	defer a.queued.Add(-5)
	if d, ok := a.drainTime(); !ok || d != 2*time.Second {
		t.Fatalf("drain time %s, %t; want 2s", d, ok)
	}
	first()
}

// The Retry-After of a caller sent away from a line spreads over the time
// the line needs to drain: never narrower than jitter's 1 to 5 times the
// least, never past the limit.
func TestRetryAfterSpreadsOverTheLine(t *testing.T) {
	spread := func(drain, limit time.Duration) (lo, hi time.Duration) {
		lo, hi = time.Hour, 0
		for range 2000 {
			d := retryWithin(time.Second, drain, limit)
			lo, hi = min(lo, d), max(hi, d)
		}
		return lo, hi
	}
	for _, tc := range []struct {
		name         string
		drain, limit time.Duration
		hiAbove      time.Duration // the widest draw comes past this
		hiMost       time.Duration
	}{
		{"short line", 2 * time.Second, 15 * time.Second, 4 * time.Second, 5 * time.Second},
		{"line of 12 s", 12 * time.Second, 15 * time.Second, 10 * time.Second, 12 * time.Second},
		{"line past the limit", time.Minute, 15 * time.Second, 13 * time.Second, 15 * time.Second},
	} {
		lo, hi := spread(tc.drain, tc.limit)
		if lo < time.Second || hi > tc.hiMost || hi <= tc.hiAbove {
			t.Errorf("%s: Retry-After from %s to %s; want from 1 s, past %s, at most %s", tc.name, lo, hi, tc.hiAbove, tc.hiMost)
		}
	}
}
