// Package serve runs a networked hub: the agents' API over HTTPS with mutual
// TLS (enrolment, renewal, sync), the admin API on loopback, and the
// controller. Its Server can also be used alone, over any hub and CA, which
// is how tests and benchmarks run it.
package serve

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/httpapi"
	"einsora.dev/edge/hub/metrics"
	"einsora.dev/edge/internal/parkconn"
	"einsora.dev/edge/protocol"
)

// Keepalives of the hub's side, which make the sign of life of a held
// poll (rule 8 on a long hold; hub.WithSignOfLife). The hub's kernel
// probes a connection silent for KeepAliveIdle, and on Linux the hub reads
// when the peer last answered (TCP_INFO): about 100 bytes every 25 s and
// no CPU of the hub's, where an HTTP/2 ping costs twice the bytes and a
// wake-up of each side. A peer that stops answering is dropped after
// KeepAliveCount probes KeepAliveIntvl apart, and its machine is offline
// 45 s after its last answer. Where the kernel does not tell (not Linux),
// the hub pings over HTTP/2 every KeepAliveIdle instead; on Linux its
// ping comes only after a poll hold without a frame: the backstop for a
// peer whose kernel answers but whose agent does not (a hung process),
// closing the connection if not answered within PingTimeout.
// docs/operations.md has the reasoning and the figures.
const (
	KeepAliveIdle  = 25 * time.Second
	KeepAliveIntvl = 5 * time.Second
	KeepAliveCount = 3
	PingTimeout    = 10 * time.Second
	// maxStreams bounds the requests one connection carries at once: an
	// agent needs two (its poll and a renewal).
	maxStreams = 8
)

// Config configures a Server.
type Config struct {
	Hub *hub.Hub
	CA  *ca.CA
	// Certificate is the hub's TLS certificate, chained to CA.
	Certificate tls.Certificate
	Clock       clock.Clock
	Logger      *slog.Logger
	// PollTimeout is the hub's poll hold; the write timeout is above it.
	PollTimeout time.Duration
	// OfflineAfter is the hub's offline rule (0: the default), which sizes
	// the HTTP/2 pings where they are the sign of life (KeepAliveIdleFor).
	OfflineAfter time.Duration
	// DrainTo is where a draining hub sends its agents; "" means back to
	// this address, once it is up again.
	DrainTo string
	Limits  Limits
	// Metrics, if set, counts syncs, enrolments, renewals and handshakes.
	Metrics *metrics.Hub
	// Readyz, if set, answers /readyz without a client certificate, for
	// load balancers.
	Readyz http.HandlerFunc
}

// Server serves the agents' API. Create it with NewServer, run it with
// Serve, stop it with Drain or Close.
type Server struct {
	hub    *hub.Hub
	api    *httpapi.API
	ca     *ca.CA
	clk    clock.Clock
	log    *slog.Logger
	limits Limits
	base   *tls.Config
	// tickets keeps base's session ticket keys those of the day.
	tickets *ticketKeys
	// configs lends handshakes base, each verifying its own conn.
	configs *handshakeConfigs
	srv     *http.Server
	// drainTo is immutable.
	drainTo string

	metrics    *metrics.Hub
	machines   *buckets
	enrollers  *buckets
	untrusted  *sources
	handshakes *handshakeSlots
	inflight   atomic.Int64
	active     *activeSlots
	anonymous  atomic.Int64
	refused    atomic.Int64
	// gate queues machines' requests in the first phase after start.
	gate *startGate
	// shedAt (Unix nanoseconds, by clk) is when a machine was last
	// turned away for load (noteShed).
	shedAt atomic.Int64
	// retryLimit is the longest Retry-After a machine sent away for the
	// hub's overload is told: a third of OfflineAfter. It is heard when
	// sent away, and back within retryLimit plus QueueWait (25 s at the
	// defaults), so even with a presence batch (OfflineAfter/3) before
	// the store hears of it, it never looks silent for OfflineAfter.
	retryLimit time.Duration
	// probeIdle is the keepalive idle time of the listener ListenFor
	// makes for the hub's offline rule (countedConn.signOfLife).
	probeIdle time.Duration

	// stopped is closed when Drain or Close stops the server.
	stopped  chan struct{}
	stopOnce sync.Once

	// mu guards the following fields.
	mu       sync.Mutex
	draining bool
	polls    map[*pollEntry]struct{}
	// parked are the polls parked now; back takes their connections
	// back to srv once answered (park.go).
	parked map[*parkedSync]struct{}
	back   *parkconn.Listener
	// watcher, made by Serve, tells when a parked poll's peer has gone;
	// nil where there is none (not Linux).
	watcher *parkconn.Watcher
}

type pollEntry struct{ cancel context.CancelFunc }

type connKey struct{}

// identityKey carries a request's identity, checked once by shed: each
// check reads the store, and the machine limit and the handler ask again.
type identityKey struct{}

type identity struct {
	machine string
	err     error
}

// identify names the machine of a request by its client certificate, as
// shed found it when the request came, or checks it now.
func (s *Server) identify(r *http.Request) (string, error) {
	if id, ok := r.Context().Value(identityKey{}).(identity); ok {
		return id.machine, id.err
	}
	return s.api.IdentifyClientCert(r)
}

// identifyRequest names r's machine. The first request on a connection
// whose handshake had the store's word on its certificate within
// CheckedFresh takes that word, instead of asking the store again: a
// returning fleet's first syncs would otherwise ask twice (issue 13).
func (s *Server) identifyRequest(r *http.Request) (string, error) {
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
		if cc := countedOf(c); cc != nil && cc.checkedWithin(CheckedFresh) {
			id, _, err := s.api.ClientCert(r)
			return id, err
		}
	}
	return s.api.IdentifyClientCert(r)
}

// CheckedFresh is how old a handshake's check of its certificate may be
// for its connection's first request to take it: a revocation reaches a
// connection within it, as it reaches a held poll (rule: cut off at once).
const CheckedFresh = time.Second

// NewServer returns a server of cfg.Hub's agents.
func NewServer(cfg Config) *Server {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PollTimeout <= 0 {
		cfg.PollTimeout = hub.DefaultPollTimeout
	}
	lim := cfg.Limits.withDefaults(runtime.GOMAXPROCS(0))
	s := &Server{
		hub: cfg.Hub, ca: cfg.CA, clk: cfg.Clock, log: cfg.Logger.With("component", "agent-api"),
		limits: lim, drainTo: cfg.DrainTo, metrics: cfg.Metrics,
		machines:   newBuckets(cfg.Clock, lim.Rate, lim.Burst, maxBucketKeys),
		enrollers:  newBuckets(cfg.Clock, lim.EnrollRate, lim.EnrollBurst, maxBucketKeys),
		untrusted:  newSources(lim.MaxUntrustedPerSource, lim.MaxUntrusted),
		handshakes: newHandshakeSlots(lim.MaxHandshakes, cfg.Clock.Now),
		active:     newActiveSlots(cfg.Clock, lim.MaxActive, lim.MaxQueued, lim.QueueWait),
		polls:      make(map[*pollEntry]struct{}),
		parked:     make(map[*parkedSync]struct{}),
		stopped:    make(chan struct{}),
		gate:       newStartGate(cfg.Clock, lim.ReconnectRate, lim.StartPhase),
		retryLimit: cmp.Or(cfg.OfflineAfter, hub.DefaultOfflineAfter) / 3,
		probeIdle:  KeepAliveIdleFor(cfg.OfflineAfter),
	}
	cfg.Hub.SetBusy(s.busyNow)
	s.api = httpapi.New(cfg.Hub, cfg.Clock, cfg.Logger)
	s.api.ReconnectWindow = s.ReconnectWindow
	s.base = &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cfg.Certificate},
		ClientAuth:       tls.VerifyClientCertIfGiven,
		ClientCAs:        cfg.CA.Pool(),
		NextProtos:       agentProtocols(),
		VerifyConnection: s.verifyConnection,
		Time:             cfg.Clock.Now,
	}
	s.tickets = &ticketKeys{ca: cfg.CA}
	// A handshake in flight is an untrusted connection: no more configs
	// are lent at once than MaxUntrusted.
	s.configs = &handshakeConfigs{clone: s.handshakeConfig, max: lim.MaxUntrusted}
	s.refreshTickets()
	mux := http.NewServeMux()
	identify := s.identify
	mux.Handle(protocol.SyncPath, counted(s.metrics.SyncResult, s.limitMachine(s.drainable(withSignOfLife(s.api.SyncHandler(identify))))))
	mux.Handle(protocol.RenewPath, counted(s.metrics.Renewal, s.limitMachine(s.api.RenewHandler(identify))))
	mux.Handle(protocol.LogsPath, s.limitMachine(s.api.LogsHandler(identify)))
	mux.Handle(protocol.EnrollPath, counted(s.metrics.Enrolment, s.api.EnrollHandler()))
	mux.Handle("GET /readyz", s.api.ReadyHandler(cfg.Hub.Ready))
	s.srv = &http.Server{
		Handler:           s.shed(mux),
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       30 * time.Second,
		// Above the poll hold: a poll answered at the timeout is
		// written, not cut.
		WriteTimeout:   cfg.PollTimeout + 30*time.Second,
		IdleTimeout:    lim.IdleTimeout,
		MaxHeaderBytes: 16 << 10,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: maxStreams,
			SendPingTimeout:      pingAfter(cfg.PollTimeout, KeepAliveIdleFor(cfg.OfflineAfter)),
			PingTimeout:          PingTimeout,
		},
		// Refused handshakes are the agents' business, not the
		// operator's: they show at debug level.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	// Each request can find its conn, to mark an anonymous one served;
	// once idle after that, it is cut (see countedConn.idle).
	s.srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}
	s.srv.ConnState = func(c net.Conn, st http.ConnState) {
		if st != http.StateIdle {
			return
		}
		if cc := countedOf(c); cc != nil && cc.served.Load() && cc.holdsSource.Load() {
			cc.idle()
		}
	}
	s.srv.TLSConfig = &tls.Config{GetConfigForClient: s.configForClient, NextProtos: s.base.NextProtos}
	return s
}

// refreshTickets keeps the session ticket keys those of the day. A failure
// leaves Go's random keys, which resume sessions until this hub stops.
func (s *Server) refreshTickets() {
	if err := s.tickets.refresh(s.base, s.clk.Now()); err != nil {
		s.log.Warn("no session ticket keys from the CA: agents resume their sessions only until this hub restarts", "err", err)
	}
}

// pingAfter is how long a connection may send no frame before the hub
// pings it over HTTP/2 (see KeepAliveIdle), for a poll hold and the
// keepalive idle time.
func pingAfter(hold, idle time.Duration) time.Duration {
	if kernelSignOfLife {
		return hold + 30*time.Second
	}
	return idle
}

// agentProtocols is the hub's choice among the protocols an agent offers
// (ALPN), in order. Where the kernel says when a peer last answered
// (Linux), HTTP/1.1 first: its held polls are parked, with no goroutine
// on them (park.go), and the kernel's keepalives are their sign of life.
// Elsewhere HTTP/2 first: its pings are the sign of life, and they need a
// goroutine reading the connection. An agent with replicas offers only
// HTTP/2 (hubclient.HTTPS.SetReplicated).
func agentProtocols() []string {
	if kernelSignOfLife {
		return []string{"http/1.1", "h2"}
	}
	return []string{"h2", "http/1.1"}
}

// unackedFor is how long data the hub sent may stay unacknowledged before
// its kernel drops the connection: as long as keepalive takes to give up.
const unackedFor = KeepAliveIdle + KeepAliveCount*KeepAliveIntvl

// TLSConfig is the server's TLS configuration, without the accounting of
// handshakes in flight: TLS 1.3 only, client certificates verified against
// the CA when given, revoked and unknown machines refused in
// VerifyConnection (which runs on resumed sessions too).
func (s *Server) TLSConfig() *tls.Config { return s.base.Clone() }

// Listen listens on addr with the TCP keepalives of the package, for the
// default offline rule.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	return ListenFor(ctx, addr, 0)
}

// ListenFor listens on addr with the TCP keepalives of the package, their
// idle time sized to the offline rule offlineAfter (0: the default).
func ListenFor(ctx context.Context, addr string, offlineAfter time.Duration) (net.Listener, error) {
	idle := KeepAliveIdleFor(offlineAfter)
	// Once a probe is answered the next comes after the idle time or the
	// interval, whichever is longer: the interval must not be longer.
	intvl := max(min(KeepAliveIntvl, idle/5), time.Second)
	lc := net.ListenConfig{KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: idle, Interval: intvl, Count: KeepAliveCount,
	}}
	return lc.Listen(ctx, "tcp", addr)
}

// KeepAliveIdleFor is the hub's keepalive idle time for an offline rule of
// offlineAfter (0: the default): KeepAliveIdle at the default 45 s,
// shorter below it. A held poll's sign of life reaches the store, where
// the other replicas read it, up to this much old when a presence batch
// takes it, plus the batch's interval (hub.PresenceEvery), plus a second
// lost to the batch's rounding down; the rest of the rule, a ninth of it
// or 2 s, whichever is more, holds that second, the kernel's timer slack
// and the batch's commit. In whole seconds, rounded down: the kernel takes
// whole seconds and Go would round a fraction up, past the budget.
func KeepAliveIdleFor(offlineAfter time.Duration) time.Duration {
	if offlineAfter <= 0 {
		offlineAfter = hub.DefaultOfflineAfter
	}
	idle := offlineAfter - hub.PresenceEvery(offlineAfter) - max(offlineAfter/9, 2*time.Second)
	return max(min(KeepAliveIdle, idle.Truncate(time.Second)), time.Second)
}

// Serve serves agents on ln until Drain or Close; then it returns nil.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	first := s.back == nil
	s.mu.Unlock()
	if first {
		s.serveParked(ln.Addr())
	}
	err := s.srv.ServeTLS(&countingListener{
		Listener: ln, slots: s.handshakes, untrusted: s.untrusted, now: s.clk.Now,
		timeout: s.limits.HandshakeTimeout, refused: &s.refused, probeIdle: s.probeIdle,
		// Time for one request's header and its longest body.
		anonLife: s.limits.ReadHeaderTimeout + s.limits.BodyTimeoutMax,
	}, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// configForClient runs at each ClientHello: it waits for a handshake slot
// while too many are in flight, refuses the handshake when none frees in
// time, and binds the handshake's end to its conn.
func (s *Server) configForClient(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	c, ok := hello.Conn.(*countedConn)
	if !ok {
		return s.base, nil
	}
	s.metrics.TLSHandshake()
	s.refreshTickets()
	if !c.begin(s.limits.HandshakeQueueWait) {
		s.metrics.TLSRefused(metrics.CauseShed)
		return nil, errors.New("too many handshakes in flight; shedding load")
	}
	return s.configs.lend(c, s.tickets.current()), nil
}

// handshakeConfig is base, verifying the connection of hc's handshake.
func (s *Server) handshakeConfig(hc *handshakeConfig) *tls.Config {
	cfg := s.base.Clone()
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		c := s.configs.giveBack(hc)
		c.end()
		checked, err := s.checkConnection(cs)
		if checked {
			c.checked()
		}
		if err != nil {
			c.refused.Store(true)
			s.metrics.TLSRefused(metrics.CauseCertificate)
			return err
		}
		// The check's time was the hub's (its store): what is left of
		// the handshake gets a deadline of its own.
		c.peersTurn()
		c.vouched(len(cs.PeerCertificates) > 0)
		if cs.DidResume {
			s.metrics.TLSResumed()
		}
		return nil
	}
	return cfg
}

// verifyConnection refuses a client certificate whose machine is unknown
// or revoked. A connection without one may only enrol: the sync and renew
// handlers answer it 401.
func (s *Server) verifyConnection(cs tls.ConnectionState) error {
	_, err := s.checkConnection(cs)
	return err
}

// checkConnection is verifyConnection, and says whether the store vouched
// for the certificate.
func (s *Server) checkConnection(cs tls.ConnectionState) (checked bool, err error) {
	if len(cs.PeerCertificates) == 0 {
		return false, nil
	}
	id, err := ca.MachineID(cs.PeerCertificates[0])
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = s.hub.CheckIdentity(ctx, id, ca.Serial(cs.PeerCertificates[0]))
	if errors.Is(err, hub.ErrNotReady) {
		// The hub's failure (its store is slow or cut off), not the
		// certificate's: a refused handshake reaches the agent as a bad
		// certificate, which it reads as revoked. Its request is checked
		// again and, if the store still fails, sent away with a
		// Retry-After.
		s.log.Debug("handshake not checked: the store failed; its requests are", "machine", id, "err", err)
		return false, nil
	}
	if err != nil {
		s.log.Debug("handshake refused", "machine", id, "err", err, "resumed", cs.DidResume)
		return false, err
	}
	return true, nil
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(adminapi.Error{Error: msg})
}

// shed keeps each kind of caller to its own budget of requests in flight:
// enrolled machines (a verified client certificate) to MaxActive, not
// counting waiting long polls; unauthenticated callers to MaxAnonActive,
// each source to its token bucket, and each body to a deadline for its
// size. Past a budget, 503 with a jittered Retry-After.
func (s *Server) shed(next http.Handler) http.Handler {
	// The checks are in functions of their own: this frame stays on a
	// held poll's stack for as long as the hub holds it, and kept small
	// it lets that stack shrink to 8 KiB (docs/performance.md, "A held
	// poll's stack").
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			s.inflight.Add(1)
			defer s.inflight.Add(-1)
			r, release := s.admitMachine(w, r)
			if release == nil {
				return
			}
			defer release()
			next.ServeHTTP(w, r)
			return
		}
		if !s.admitAnonymous(w, r) {
			return
		}
		defer s.anonymous.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// admitMachine takes a request of an enrolled machine into the budget of
// requests in flight and returns it with its identity, and the release of
// its place; release is nil when it answered the request itself, sending
// it away.
func (s *Server) admitMachine(w http.ResponseWriter, r *http.Request) (_ *http.Request, release func()) {
	release, ok := s.active.take(r.Context())
	if !ok {
		s.sendAway(w, r)
		return r, nil
	}
	id, err := s.identifyRequest(r)
	ctx := context.WithValue(r.Context(), identityKey{}, identity{id, err})
	r = r.WithContext(hub.OnHeld(ctx, release))
	if err == nil {
		if ok, wait := s.gate.admit(id); !ok {
			release()
			s.noteShed()
			retryAfterHeader(w, wait)
			writeError(w, http.StatusServiceUnavailable, "the hub just started and takes its machines back at a steady rate; come back after Retry-After")
			return r, nil
		}
	}
	return r, release
}

// admitAnonymous takes a request without a client certificate into its
// source's bucket and the budget of such requests in flight, or answers
// it and returns false. When it returns true, the caller gives its place
// back (s.anonymous) once it has served it.
func (s *Server) admitAnonymous(w http.ResponseWriter, r *http.Request) bool {
	// Served, even if refused: the conn is cut once idle.
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
		if cc := countedOf(c); cc != nil {
			cc.served.Store(true)
		}
	}
	if ok, wait := s.enrollers.take(sourceKey(r.RemoteAddr)); !ok {
		retryAfterHeader(w, wait)
		writeError(w, http.StatusTooManyRequests, "too many requests from this address; try again after Retry-After")
		return false
	}
	// The server's ReadTimeout is for agents' long bodies; a peer
	// without a certificate gets only what its declared size needs.
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.limits.bodyTimeout(r.ContentLength)))
	if n := s.anonymous.Add(1); n > int64(s.limits.MaxAnonActive) {
		s.anonymous.Add(-1)
		s.busy(w, r)
		return false
	}
	return true
}

func (s *Server) busy(w http.ResponseWriter, r *http.Request) {
	s.busyFor(w, r, jittered(s.limits.RetryAfter))
}

func (s *Server) busyFor(w http.ResponseWriter, r *http.Request, retry time.Duration) {
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		// Otherwise HTTP/1.1 reads the unread body before it answers,
		// and a trickled body would hold the answer back.
		w.Header().Set("Connection", "close")
	}
	retryAfterHeader(w, retry)
	writeError(w, http.StatusServiceUnavailable, "the hub is busy; try again after Retry-After")
}

// noteShed records that a machine was turned away for this server's load.
func (s *Server) noteShed() { s.shedAt.Store(s.clk.Now().UnixNano()) }

// busyNow reports whether, within the last hub.ReplicaRefresh, a machine's
// request was turned away for load (a full line, the restart gate) or a
// handshake waited for a slot: the hub then publishes no count of its
// polls, and no replica sends it agents to even out the fleet.
func (s *Server) busyNow() bool {
	since := s.clk.Now().Add(-hub.ReplicaRefresh).UnixNano()
	return s.shedAt.Load() > since || s.handshakes.waitedAt.Load() > since
}

// sendAway answers a machine's request that found no active slot in time
// (issue 13). The machine spoke, so it is heard: the hub's own backlog
// must never turn into its silence, and so a false offline. It is told to
// come back when the line will have room, spread over the time the line
// takes to drain, up to retryLimit.
func (s *Server) sendAway(w http.ResponseWriter, r *http.Request) {
	s.noteShed()
	// The handshake checked the certificate with the store; asking again
	// would add to the overload, and a revocation cuts the connection.
	if id, _, err := s.api.ClientCert(r); err == nil {
		s.hub.HeardFrom(id)
	}
	drain, ok := s.active.drainTime()
	if !ok {
		// The line did not move in a whole wait, or has not been measured.
		drain = s.retryLimit
	}
	s.busyFor(w, r, retryWithin(s.limits.RetryAfter, drain, s.retryLimit))
}

// limitMachine holds each machine to its token bucket. A poll that the hub
// answered early because it woke it (desired state changed) is given back:
// the agent comes straight back for a change it did not make, and a limit
// a correct agent never reaches must not count the hub's own changes.
func (s *Server) limitMachine(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := s.identify(r)
		if err == nil {
			if ok, wait := s.machines.take(id); !ok {
				retryAfterHeader(w, wait)
				writeError(w, http.StatusTooManyRequests, "too many requests from this machine; the agent retries after Retry-After")
				return
			}
			r = r.WithContext(hub.OnWoken(r.Context(), func() { s.machines.refund(id) }))
		}
		next.ServeHTTP(w, r) // which answers 401 without a certificate
	})
}

// withSignOfLife tells the hub how to know when the connection of a sync
// last showed its peer alive, for the poll it may hold (rule 8).
func withSignOfLife(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
			if cc := countedOf(c); cc != nil {
				r = r.WithContext(hub.WithSignOfLife(r.Context(), cc.signOfLife))
			}
		}
		next.ServeHTTP(w, r)
	})
}

// drainable lets Drain end a waiting poll with a directed reconnect, and
// parks the polls the hub would hold over HTTP/1.1 (park.go), which Drain
// answers as well.
func (s *Server) drainable(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		e := &pollEntry{cancel: cancel}
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			s.writeReconnect(w)
			return
		}
		s.polls[e] = struct{}{}
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.polls, e)
			s.mu.Unlock()
		}()
		tw := &trackingWriter{ResponseWriter: w}
		p := s.parker(r)
		next.ServeHTTP(tw, withParker(r.WithContext(ctx), p))
		if p != nil && p.isParked() {
			s.take(w, r, p)
			return
		}
		if !tw.wrote && r.Context().Err() == nil && s.isDraining() {
			s.writeReconnect(w)
		}
	})
}

func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

func (s *Server) writeReconnect(w http.ResponseWriter) {
	resp := protocol.SyncResponse{
		ProtocolVersion: protocol.Version,
		StoreID:         s.hub.StoreID(), Unchanged: true, Workloads: []protocol.DesiredWorkload{},
		Reconnect: &protocol.Reconnect{URL: s.drainTo}, HubTime: s.clk.Now(),
	}
	if s.drainTo == "" {
		// Back to this address, which is restarting: spread over the
		// window. A drain to another replica stays immediate.
		resp.ReconnectWindowMS = s.ReconnectWindow().Milliseconds()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(resp)
}

type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (t *trackingWriter) WriteHeader(code int) {
	t.wrote = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(b)
}

// Drain stops the server gently: every waiting poll is answered at once
// with a directed reconnect (to DrainTo, or "" for this address), new
// polls get the same answer, the listener closes, and Drain returns when
// the answers are written or ctx is done (then it closes what is left).
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	n := len(s.polls) + len(s.parked)
	for e := range s.polls {
		e.cancel()
	}
	s.mu.Unlock()
	for _, p := range s.parkedNow() {
		p.Answer(s.writeReconnect)
	}
	s.stop()
	s.log.Info("draining: directed reconnects sent to waiting agents", "polls", n, "to", s.drainTo)
	// Beside the shutdown: a store that does not answer must not hold
	// it up.
	var left sync.WaitGroup
	left.Go(func() {
		if err := s.hub.Leave(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("draining: cannot tell the other replicas this one is going; they may send it agents until it stops saying it is alive", "err", err)
		}
	})
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	left.Wait()
	return err
}

// ReconnectWindow is the window this server tells its agents to spread
// their return over after it restarts or drains to its own address: the
// machines connected now over Limits.ReconnectRate, at least
// Limits.MinReconnectWindow.
func (s *Server) ReconnectWindow() time.Duration {
	return reconnectWindow(max(s.inflight.Load(), int64(s.hub.WaitingPolls())), s.limits.ReconnectRate, s.limits.MinReconnectWindow)
}

// Close stops the server at once, cutting every connection: what a crash
// looks like to agents.
func (s *Server) Close() error {
	s.stop()
	err := s.srv.Close()
	// net/http does not see the parked connections.
	for _, p := range s.parkedNow() {
		p.drop()
	}
	return err
}

// stop ends the sweep and the watch of parked polls.
func (s *Server) stop() {
	s.stopOnce.Do(func() {
		close(s.stopped)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.watcher != nil {
			s.watcher.Close()
		}
	})
}

// Stats are the server's gauges, for tests and operators.
type Stats struct {
	Handshakes int64 // TLS handshakes in flight
	Requests   int64 // machines' requests in flight, those in line and polls net/http holds included; parked ones are only in hub.WaitingPolls
	Queued     int64 // machines' requests waiting their turn past MaxActive
	Anonymous  int64 // unauthenticated requests in flight
	Untrusted  int64 // connections no certificate vouches for yet
	Sources    int   // sources holding untrusted connections
	Refused    int64 // connections closed at accept, since the start
}

// Queued is how many machines' requests wait their turn now.
func (s *Server) Queued() int { return s.active.waiting() }

// Stats returns the gauges now.
func (s *Server) Stats() Stats {
	n, held := s.untrusted.len()
	return Stats{
		Handshakes: s.handshakes.inFlight(), Requests: s.inflight.Load(), Queued: int64(s.active.waiting()), Anonymous: s.anonymous.Load(),
		Untrusted: int64(held), Sources: n, Refused: s.refused.Load(),
	}
}

// DefaultNames are the names the server certificate holds besides the
// host name and --name flags: an agent on the hub's own machine can reach
// it by them.
var DefaultNames = []string{"localhost", "127.0.0.1", "::1"}

func agentURL(ln net.Listener, names []string) string {
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = names[0]
	}
	return "https://" + net.JoinHostPort(host, port)
}

func errorf(format string, args ...any) error { return fmt.Errorf("serve: "+format, args...) }
