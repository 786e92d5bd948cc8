package serve_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/sim"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/serve"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is a networked hub on loopback: real TLS, real store, wall clock.
type env struct {
	t    *testing.T
	dir  string
	addr string
	opts envOptions

	st     *sqlite.Store
	hub    *hub.Hub
	ca     *ca.CA
	srv    *serve.Server
	url    string
	cancel context.CancelFunc
	done   sync.WaitGroup
}

type envOptions struct {
	pollTimeout  time.Duration
	certLifetime time.Duration
	drainTo      string
	limits       serve.Limits
	// wrap, if set, wraps the store the hub uses.
	wrap func(store.Store) store.Store
	// offlineAfter is the hub's, and sizes its keepalives; 0 means the
	// default.
	offlineAfter time.Duration
}

func startEnv(t *testing.T, opts envOptions) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), addr: "127.0.0.1:0", opts: opts}
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *env) start() {
	t := e.t
	t.Helper()
	var err error
	e.ca, err = ca.Open(ca.Options{Dir: e.dir, ClientLifetime: e.opts.certLifetime})
	if err != nil {
		t.Fatal(err)
	}
	e.st, err = sqlite.Open(context.Background(), filepath.Join(e.dir, "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	var st store.Store = e.st
	if e.opts.wrap != nil {
		st = e.opts.wrap(st)
	}
	e.hub, err = hub.New(context.Background(), hub.Config{
		Store: st, CA: e.ca, Logger: discard, PollTimeout: e.opts.pollTimeout, Region: "r1", AllowSim: true,
		ControllerInterval: 200 * time.Millisecond, OfflineAfter: e.opts.offlineAfter,
	})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := e.ca.ServerCertificate([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := serve.ListenFor(context.Background(), e.addr, e.opts.offlineAfter)
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	e.url = "https://" + e.addr
	e.srv = serve.NewServer(serve.Config{
		Hub: e.hub, CA: e.ca, Certificate: cert, Logger: discard, PollTimeout: e.opts.pollTimeout,
		DrainTo: e.opts.drainTo, Limits: e.opts.limits, OfflineAfter: e.opts.offlineAfter,
	})
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done.Go(func() { e.hub.Run(ctx) })
	e.done.Go(func() {
		if err := e.srv.Serve(ln); err != nil {
			t.Error(err)
		}
	})
}

// stop stops the hub abruptly, as a crash would.
func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.srv.Close()
	e.cancel()
	e.done.Wait()
	e.st.Close()
	e.cancel = nil
}

// restart stops the hub and starts it again on the same address, data and
// CA after down.
func (e *env) restart(down time.Duration) {
	e.stop()
	time.Sleep(down)
	e.start()
}

func (e *env) token(owner, region string) string {
	e.t.Helper()
	ctx := context.Background()
	if err := e.hub.EnsureTenant(ctx, owner); err != nil {
		e.t.Fatal(err)
	}
	tok, _, err := e.hub.CreateEnrollToken(ctx, owner, region, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok.String()
}

// extraServer serves the same hub on another address, draining to
// drainTo, and returns its URL.
func (e *env) extraServer(drainTo string) (string, *serve.Server) {
	e.t.Helper()
	cert, err := e.ca.ServerCertificate([]string{"127.0.0.1"})
	if err != nil {
		e.t.Fatal(err)
	}
	ln, err := serve.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	srv := serve.NewServer(serve.Config{
		Hub: e.hub, CA: e.ca, Certificate: cert, Logger: discard, PollTimeout: e.opts.pollTimeout, DrainTo: drainTo,
	})
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ln) })
	e.t.Cleanup(func() { srv.Close(); wg.Wait() })
	return "https://" + ln.Addr().String(), srv
}

// enroll enrols a new machine of owner acme in r1, as einsora-agent enroll
// does, and returns its state directory and network link.
func (e *env) enroll() (string, *agent.Network) { return e.enrollAt(e.url) }

// enrollAt enrols through the server at url.
func (e *env) enrollAt(url string) (string, *agent.Network) {
	e.t.Helper()
	dir, nw, err := e.tryEnroll(url, e.token("acme", "r1"))
	if err != nil {
		e.t.Fatal(err)
	}
	return dir, nw
}

// tryEnroll enrols with tok; it may run on any goroutine.
func (e *env) tryEnroll(url, tok string) (string, *agent.Network, error) {
	dir := e.t.TempDir()
	if _, err := agent.Enroll(context.Background(), agent.EnrollOptions{StateDir: dir, HubURL: url, Token: tok}); err != nil {
		return "", nil, err
	}
	nw, err := agent.OpenNetwork(dir, agent.NetworkOptions{Logger: discard})
	if err != nil {
		return "", nil, err
	}
	e.t.Cleanup(nw.Transport().Close)
	return dir, nw, nil
}

func (e *env) machine(id string) store.Machine {
	e.t.Helper()
	m, err := e.hub.Machine(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return m.Machine
}

func testInventory() protocol.Inventory {
	return protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 4, MemoryMB: 16384}
}

// runningAgent is an in-process agent syncing over the real HTTPS transport.
type runningAgent struct {
	*agent.Agent
	sim *sim.Driver
	rec *recorder
	nw  *agent.Network
}

// startAgent runs an agent on an enrolled state directory until the test
// ends.
func startAgent(t *testing.T, dir string, nw *agent.Network, bo hubclient.Backoff) *runningAgent {
	t.Helper()
	d, err := sim.New(filepath.Join(dir, "sim"), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{next: nw.Transport()}
	a, err := agent.Open(agent.Config{
		StateDir: dir, Drivers: drivers.NewHost(d), Logger: discard, Transport: rec, Backoff: bo,
		Inventory: func(context.Context) protocol.Inventory { return testInventory() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		a.Close()
		d.Close()
	})
	return &runningAgent{Agent: a, sim: d, rec: rec, nw: nw}
}

// recorder is a transport that records every sync: when it started, when
// it ended, how, and which modes it was told.
type recorder struct {
	next *hubclient.HTTPS

	// mu guards the following fields.
	mu    sync.Mutex
	syncs []syncRecord
}

type syncRecord struct {
	start, end time.Time
	url        string
	done       bool // false while the sync is in flight
	err        error
	resp       *protocol.SyncResponse
}

func (r *recorder) Sync(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
	r.mu.Lock()
	i := len(r.syncs)
	r.syncs = append(r.syncs, syncRecord{start: time.Now(), url: r.next.URL()})
	r.mu.Unlock()
	resp, err := r.next.Sync(ctx, req)
	r.mu.Lock()
	s := &r.syncs[i]
	s.end, s.done, s.err, s.resp = time.Now(), true, err, resp
	r.mu.Unlock()
	return resp, err
}

func (r *recorder) all() []syncRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]syncRecord(nil), r.syncs...)
}

// firstOKAfter is the start of the first sync that started after t and
// succeeded, and how many syncs started after t up to and including it.
func (r *recorder) firstOKAfter(t time.Time) (time.Time, int, bool) {
	n := 0
	for _, s := range r.all() {
		if s.start.Before(t) {
			continue
		}
		n++
		if s.done && s.err == nil {
			return s.start, n, true
		}
	}
	return time.Time{}, n, false
}

// failures are the syncs that failed for a reason other than being cut
// short on purpose.
func (r *recorder) failures() []syncRecord {
	var out []syncRecord
	for _, s := range r.all() {
		if s.done && s.err != nil && !errors.Is(s.err, context.Canceled) {
			out = append(out, s)
		}
	}
	return out
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawClient makes TLS connections with a machine's certificate and a
// session cache, so a test can see resumption.
func rawClient(e *env, cert tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		RootCAs:            e.ca.Pool(),
		ServerName:         "127.0.0.1",
		Certificates:       []tls.Certificate{cert},
		ClientSessionCache: tls.NewLRUClientSessionCache(4),
		NextProtos:         []string{"http/1.1"},
	}
}
