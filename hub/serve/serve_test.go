package serve_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/serve"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

func createWorkload(t *testing.T, e *env, name string) store.Workload {
	t.Helper()
	w, err := e.hub.CreateWorkload(context.Background(), hub.WorkloadSpec{
		Tenant: "acme", Name: name, Kind: protocol.KindContainer, Class: "cpu-1", Region: "r1", Image: "sim:",
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func stateOf(t *testing.T, e *env, id string) store.Workload {
	t.Helper()
	w, err := e.hub.Workload(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestEnrolThenRunAWorkloadOverMutualTLS(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: time.Second})
	dir, nw := e.enroll()
	if st, err := os.Stat(filepath.Join(dir, agent.KeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want mode 0600", st, err)
	}
	a := startAgent(t, dir, nw, hubclient.Backoff{})
	w := createWorkload(t, e, "web")
	waitFor(t, 15*time.Second, "the workload to run", func() bool { return stateOf(t, e, w.ID).State == store.StateRunning })
	m := e.machine(a.MachineID())
	if m.Owner != "acme" || m.Region != "r1" || !m.CertExpires.Equal(nw.CertExpires()) {
		t.Errorf("machine %s of %s in %s, cert expires %s (agent has %s)", m.ID, m.Owner, m.Region, m.CertExpires, nw.CertExpires())
	}
	if f := a.rec.failures(); len(f) > 0 {
		t.Errorf("syncs failed: %v", f[0].err)
	}
}

// transportWith makes an HTTPS transport presenting certPEM and key.
func transportWith(t *testing.T, e *env, certPEM []byte, key *ecdsa.PrivateKey) *hubclient.HTTPS {
	t.Helper()
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	tc, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := hubclient.NewHTTPS(hubclient.HTTPSConfig{URL: e.url, CA: e.ca.Certificate(), Certificate: tc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

func signed(t *testing.T, authority *ca.CA, machineID string) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: machineID}}, key)
	csr, _ := x509.ParseCertificateRequest(der)
	certPEM, _, err := authority.SignMachine(csr, machineID)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, key
}

// Certificates the hub did not issue, or no longer honours, are refused,
// each with a message that says what to do.
func TestRefusedCertificates(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: time.Second})
	dir, _ := e.enroll()
	machineID, _ := os.ReadFile(filepath.Join(dir, "machine-id"))
	id := strings.TrimSpace(string(machineID))

	otherCA, err := ca.Open(ca.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// The hub's own CA, with a clock forty days behind: its certificate
	// expired ten days ago.
	pastCA, err := ca.Open(ca.Options{Dir: e.dir, Clock: clock.NewFake(time.Now().Add(-40 * 24 * time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version}
	tests := []struct {
		name string
		tr   func() *hubclient.HTTPS
		says string
	}{
		{"another_ca", func() *hubclient.HTTPS { c, k := signed(t, otherCA, id); return transportWith(t, e, c, k) }, "another hub's CA"},
		{"expired", func() *hubclient.HTTPS { c, k := signed(t, pastCA, id); return transportWith(t, e, c, k) }, "expired"},
		{"unknown_machine", func() *hubclient.HTTPS { c, k := signed(t, e.ca, "m-ghost"); return transportWith(t, e, c, k) }, "enrol again"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A refusal whose alert a reset lost is named by the agent's
			// next try, on that try's one connection.
			tr := tt.tr()
			_, err := tr.Sync(context.Background(), req)
			var refused *hubclient.TLSRefusedError
			if !errors.As(err, &refused) {
				_, err = tr.Sync(context.Background(), req)
			}
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("got %v, want the handshake refused, saying %q", err, tt.says)
			}
		})
	}
	t.Run("no_certificate", func(t *testing.T) {
		fp := e.ca.Fingerprint()
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: hubclient.PinnedTLSConfig(fp, "127.0.0.1")}}
		resp, err := c.Post(e.url+protocol.SyncPath, "application/json", strings.NewReader(`{"protocol_version":1}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body adminapi.Error
		json.NewDecoder(resp.Body).Decode(&body)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body.Error, "einsora-agent enroll") {
			t.Fatalf("got %d %q, want 401 saying how to enrol", resp.StatusCode, body.Error)
		}
	})
}

// rawSync posts one sync over a new TLS connection made with cfg (whose
// session cache may let it resume), and says whether it resumed.
func rawSync(t *testing.T, e *env, cfg *tls.Config) (resumed bool, status int, err error) {
	t.Helper()
	c, err := tls.Dial("tcp", e.addr, cfg)
	if err != nil {
		return false, 0, err
	}
	defer c.Close()
	resumed = c.ConnectionState().DidResume
	body := `{"protocol_version":1,"statuses":[]}`
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", protocol.SyncPath, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return resumed, 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resumed, resp.StatusCode, nil
}

// A revoked machine is cut off at once: its waiting poll ends within a
// second, and a resumed TLS session is refused like a new one.
func TestRevokedMachineIsCutOffAtOnceAlsoOnResumedSessions(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: 20 * time.Second})
	dir, nw := e.enroll()
	tr := nw.Transport()
	resp, err := tr.Sync(context.Background(), &protocol.SyncRequest{ProtocolVersion: protocol.Version})
	if err != nil {
		t.Fatal(err)
	}
	raw := rawClient(e, *tr.Certificate())
	if _, status, err := rawSync(t, e, raw); err != nil || status != http.StatusOK {
		t.Fatalf("first raw sync: %d, %v", status, err)
	}
	if resumed, status, err := rawSync(t, e, raw); err != nil || status != http.StatusOK || !resumed {
		t.Fatalf("second raw sync: resumed %v, %d, %v; want a resumed session that works", resumed, status, err)
	}

	ended := make(chan error, 1)
	go func() {
		_, err := tr.Sync(context.Background(), &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: resp.StoreID, Generation: resp.Generation})
		ended <- err
	}()
	waitFor(t, 5*time.Second, "the poll to wait", func() bool { return e.hub.WaitingPolls() == 1 })
	machineID, _ := os.ReadFile(filepath.Join(dir, "machine-id"))
	start := time.Now()
	if err := e.hub.RevokeMachine(context.Background(), strings.TrimSpace(string(machineID))); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		var he *hubclient.HubError
		if !errors.As(err, &he) || he.Code != http.StatusForbidden || !strings.Contains(he.Message, "revoked") {
			t.Fatalf("poll ended with %v, want 403 saying revoked", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("cut off after %s, want under a second", took)
		}
	case <-time.After(time.Second):
		t.Fatal("the waiting poll was not cut off within a second")
	}

	resumed, _, err := rawSync(t, e, raw)
	if !resumed {
		t.Fatal("the session was not resumed: the test shows nothing")
	}
	if err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Fatalf("resumed session of a revoked machine: got %v, want the handshake refused", err)
	}
	if _, err := tr.Sync(context.Background(), &protocol.SyncRequest{ProtocolVersion: protocol.Version}); err == nil {
		t.Error("a new sync of the revoked machine succeeded")
	}
}

// Certificates live three seconds and are renewed at about 70% of that,
// while the agent syncs: no sync fails and none waits longer than a poll.
func TestRenewalWhileSyncingLeavesNoGap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	const poll = 300 * time.Millisecond
	e := startEnv(t, envOptions{pollTimeout: poll, certLifetime: 3 * time.Second})
	dir, nw := e.enroll()
	a := startAgent(t, dir, nw, hubclient.Backoff{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { nw.RunRenewal(ctx) })
	first := nw.CertExpires()
	time.Sleep(8 * time.Second)
	cancel()
	wg.Wait()

	if renewed := nw.CertExpires().Sub(first); renewed < 4*time.Second {
		t.Errorf("the certificate moved on by %s in 8s; want at least two renewals", renewed)
	}
	if m := e.machine(a.MachineID()); !m.CertExpires.Equal(nw.CertExpires()) {
		t.Errorf("hub records expiry %s, agent holds %s", m.CertExpires, nw.CertExpires())
	}
	syncs := a.rec.all()
	for _, s := range a.rec.failures() {
		t.Errorf("sync at %s failed: %v", s.start.Format("15:04:05.000"), s.err)
	}
	var ends []time.Time
	for _, s := range syncs {
		if s.err == nil {
			ends = append(ends, s.end)
		}
	}
	if len(ends) < 10 {
		t.Fatalf("only %d syncs in 8s", len(ends))
	}
	for i := 1; i < len(ends); i++ {
		if gap := ends[i].Sub(ends[i-1]); gap > poll+700*time.Millisecond {
			t.Errorf("a gap of %s between syncs at %s", gap, ends[i].Format("15:04:05.000"))
		}
	}
}

// A draining hub answers waiting polls with a directed reconnect, and the
// agent redials the hub it names at once, without backing off.
func TestDrainSendsAgentsToAnotherHubAtOnce(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: 10 * time.Second})
	target, _ := e.extraServer("")
	draining, srv := e.extraServer(target)
	dir, nw := e.enrollAt(draining)
	// Backing off would wait the full second: the test tells the two apart.
	a := startAgent(t, dir, nw, hubclient.Backoff{Base: time.Second, Rand: func(n int64) int64 { return n - 1 }})
	waitFor(t, 5*time.Second, "the agent to poll", func() bool { return e.hub.WaitingPolls() == 1 })

	drained := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	var redirect, arrived time.Time
	defer func() {
		if t.Failed() {
			for _, s := range a.rec.all() {
				t.Logf("%s %s %s %v %v", s.start.Format("05.000"), s.end.Format("05.000"), s.url, s.done, s.err)
			}
		}
	}()
	waitFor(t, 5*time.Second, "a sync with the hub drained to", func() bool {
		redirect, arrived = time.Time{}, time.Time{}
		for _, s := range a.rec.all() {
			switch {
			case redirect.IsZero():
				if s.done && s.end.After(drained) && errors.Is(s.err, hubclient.ErrReconnect) {
					redirect = s.end
				}
			case s.url == target:
				arrived = s.start
				return true
			}
		}
		return false
	})
	if took := arrived.Sub(redirect); took > 500*time.Millisecond {
		t.Errorf("redialled %s after the directed reconnect; want at once", took)
	}
	if nw.Transport().URL() != target {
		t.Errorf("agent dials %s, want %s", nw.Transport().URL(), target)
	}
}

// Two polls of one machine: the newer replaces the older, which is
// answered 409.
func TestOnePollPerMachine(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: 10 * time.Second})
	_, nw := e.enroll()
	tr := nw.Transport()
	resp, err := tr.Sync(context.Background(), &protocol.SyncRequest{ProtocolVersion: protocol.Version})
	if err != nil {
		t.Fatal(err)
	}
	held := &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: resp.StoreID, Generation: resp.Generation}
	first := make(chan error, 1)
	go func() { _, err := tr.Sync(context.Background(), held); first <- err }()
	waitFor(t, 5*time.Second, "the first poll to wait", func() bool { return e.hub.WaitingPolls() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tr.Sync(ctx, held)
	select {
	case err := <-first:
		var he *hubclient.HubError
		if !errors.As(err, &he) || he.Code != http.StatusConflict {
			t.Fatalf("older poll: got %v, want 409", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the older poll kept waiting")
	}
}

// Issue 13: a held poll gives back its share of MaxActive, so a machine's
// poll that waits for news never keeps another machine's request in line.
// Held over HTTP/2 by net/http, or parked over HTTP/1.1, alike.
func TestHeldPollGivesBackItsSlot(t *testing.T) {
	for _, over := range []hubclient.HTTPSConfig{{HTTP1: true}, {HTTP2: true}} {
		e := startEnv(t, envOptions{pollTimeout: time.Minute, limits: serve.Limits{MaxActive: 1, QueueWait: time.Minute}})
		_, a := e.enroll()
		_, b := e.enroll()
		ta, err := hubclient.NewHTTPS(hubclient.HTTPSConfig{URL: e.url, CA: e.ca.Certificate(), Certificate: *a.Transport().Certificate(), HTTP1: over.HTTP1, HTTP2: over.HTTP2})
		if err != nil {
			t.Fatal(err)
		}
		defer ta.Close()
		resp, err := ta.Sync(context.Background(), &protocol.SyncRequest{ProtocolVersion: protocol.Version})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go ta.Sync(ctx, &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: resp.StoreID, Generation: resp.Generation})
		waitFor(t, 5*time.Second, "the poll to be held", func() bool { return e.hub.WaitingPolls() == 1 })
		bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer bcancel()
		if _, err := b.Transport().Sync(bctx, &protocol.SyncRequest{ProtocolVersion: protocol.Version}); err != nil {
			t.Fatalf("HTTP/1.1 %v, HTTP/2 %v: another machine's sync beside a held poll, one slot: %v", over.HTTP1, over.HTTP2, err)
		}
	}
}

func TestRestartKeepsWorkloadsAndSpreadsReconnects(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 200 agents")
	}
	agents := 200
	if raceEnabled {
		agents = 60
	}
	e := startEnv(t, envOptions{pollTimeout: 2 * time.Second, limits: serve.Limits{EnrollRate: 1000, EnrollBurst: agents}})
	type enrolled struct {
		dir string
		nw  *agent.Network
		err error
	}
	began := time.Now()
	got := make([]enrolled, agents)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range got {
		tok := e.token("acme", "r1")
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			got[i].dir, got[i].nw, got[i].err = e.tryEnroll(e.url, tok)
		})
	}
	wg.Wait()
	t.Logf("enrolled %d in %s", agents, time.Since(began).Round(time.Millisecond))
	fleet := make([]*runningAgent, agents)
	for i, g := range got {
		if g.err != nil {
			t.Fatal(g.err)
		}
		fleet[i] = startAgent(t, g.dir, g.nw, hubclient.Backoff{}) // 1s base, 60s cap
	}
	t.Logf("agents started at %s", time.Since(began).Round(time.Millisecond))
	byMachine := map[string]*runningAgent{}
	for _, a := range fleet {
		byMachine[a.MachineID()] = a
	}
	var ws []store.Workload
	for i := range agents / 2 {
		ws = append(ws, createWorkload(t, e, fmt.Sprintf("w%d", i)))
	}
	waitFor(t, 30*time.Second, "every workload to run", func() bool {
		all, _ := e.hub.Workloads(context.Background())
		n := 0
		for _, w := range all {
			if w.State == store.StateRunning {
				n++
			}
		}
		return n == len(ws)
	})

	t.Logf("workloads running at %s", time.Since(began).Round(time.Millisecond))
	down := time.Now()
	e.restart(300 * time.Millisecond)
	up := time.Now()
	var instants []time.Time
	waitFor(t, 30*time.Second, "every agent to reconnect", func() bool {
		instants = instants[:0]
		for _, a := range fleet {
			at, _, ok := a.rec.firstOKAfter(down)
			if !ok {
				return false
			}
			instants = append(instants, at)
		}
		return true
	})
	attempts := 0
	for _, a := range fleet {
		_, n, _ := a.rec.firstOKAfter(down)
		attempts += n
	}
	slices.SortFunc(instants, func(a, b time.Time) int { return a.Compare(b) })
	span := instants[len(instants)-1].Sub(instants[0])
	// The first backoff window is [0, 1s]: full jitter spreads the fleet
	// over it, rather than landing it on the hub in one instant.
	if span < time.Second/3 {
		t.Errorf("reconnects span %s, want at least a third of the 1s window", span)
	}
	busiest := 0
	for i := range instants {
		j := i
		for j < len(instants) && instants[j].Sub(instants[i]) < 10*time.Millisecond {
			j++
		}
		busiest = max(busiest, j-i)
	}
	if busiest > agents/4 {
		t.Errorf("%d of %d agents reconnected within the same 10ms", busiest, agents)
	}
	if per := float64(attempts) / float64(agents); per > 1.3 {
		t.Errorf("%.2f attempts per agent to reconnect, want at most 1.3", per)
	}
	t.Logf("hub down %s; reconnects from +%s to +%s after it came back, span %s, busiest 10ms: %d, attempts per agent: %.2f",
		up.Sub(down).Round(time.Millisecond), instants[0].Sub(up).Round(time.Millisecond),
		instants[len(instants)-1].Sub(up).Round(time.Millisecond), span.Round(time.Millisecond), busiest, float64(attempts)/float64(agents))

	// Give the restarted hub a few controller passes, then look: every
	// workload still runs its first attempt, started once, never told to
	// stop or be removed.
	time.Sleep(time.Second)
	for _, w := range ws {
		got := stateOf(t, e, w.ID)
		if got.State != store.StateRunning || got.Attempt != 1 {
			t.Errorf("workload %s after restart: %s attempt %d", w.ID, got.State, got.Attempt)
			continue
		}
		a := byMachine[got.Machine]
		if starts, err := a.sim.Starts(w.ID); err != nil || starts != 1 {
			t.Errorf("workload %s started %d times (%v)", w.ID, starts, err)
		}
	}
	for _, a := range fleet {
		for _, s := range a.rec.all() {
			if s.resp == nil {
				continue
			}
			for _, d := range s.resp.Workloads {
				if d.Mode != protocol.ModeRun {
					t.Fatalf("machine %s was told to %s workload %s", a.MachineID(), d.Mode, d.ID)
				}
			}
		}
	}
}

// Each machine has its token bucket: past its burst, 429 with Retry-After.
// certReads counts the certificate lookups made through a store.
type certReads struct {
	store.Store
	n *atomic.Int64
}

func (s certReads) View(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.View(ctx, func(tx store.Tx) error { return fn(certReadsTx{tx, s.n}) })
}

type certReadsTx struct {
	store.Tx
	n *atomic.Int64
}

func (t certReadsTx) Certificate(serial string) (store.Certificate, error) {
	t.n.Add(1)
	return t.Tx.Certificate(serial)
}

// Issue 13: an agent's request checks its certificate in the store once,
// not once for each layer that asks who it is (the load shedding, the
// machine limit, the handler); and a connection's first request takes the
// check its handshake has just made.
func TestARequestChecksItsCertificateOnce(t *testing.T) {
	var n atomic.Int64
	e := startEnv(t, envOptions{pollTimeout: 10 * time.Second, wrap: func(s store.Store) store.Store { return certReads{s, &n} }})
	_, nw := e.enroll()
	tr := nw.Transport()
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version} // no store ID: answered at once
	before := n.Load()
	if _, err := tr.Sync(context.Background(), req); err != nil { // the connection and its handshake
		t.Fatal(err)
	}
	if got := n.Load() - before; got != 1 {
		t.Errorf("a new connection's handshake and first sync read the certificate %d times, want once", got)
	}
	before = n.Load()
	const syncs = 4
	for i := range syncs {
		if _, err := tr.Sync(context.Background(), req); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	if got := n.Load() - before; got != syncs {
		t.Errorf("%d syncs read their certificate %d times, want once each", syncs, got)
	}
}

// ticketSeen says when a session ticket came.
type ticketSeen struct {
	tls.ClientSessionCache
	put chan struct{}
}

func (c *ticketSeen) Put(key string, cs *tls.ClientSessionState) {
	c.ClientSessionCache.Put(key, cs)
	select {
	case c.put <- struct{}{}:
	default:
	}
}

// The first request takes its handshake's check only while it is fresh: a
// machine revoked since then, longer ago than that, is refused.
func TestFirstRequestAfterAStaleHandshakeCheckAsksAgain(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: 10 * time.Second})
	dir, nw := e.enroll()
	cfg := rawClient(e, *nw.Transport().Certificate())
	ticket := &ticketSeen{ClientSessionCache: cfg.ClientSessionCache, put: make(chan struct{}, 1)}
	cfg.ClientSessionCache = ticket
	c, err := tls.Dial("tcp", e.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The hub sends its session ticket once its side of the handshake,
	// the certificate's check included, is done.
	for deadline := time.Now().Add(5 * time.Second); len(ticket.put) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no session ticket from the hub")
		}
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		c.Read(make([]byte, 1))
	}
	c.SetReadDeadline(time.Time{})
	// The certificate alone, not its machine: only the identity check
	// refuses it.
	leaf, err := x509.ParseCertificate(nw.Transport().Certificate().Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	machineID, _ := os.ReadFile(filepath.Join(dir, "machine-id"))
	if err := e.hub.RevokeCertificate(context.Background(), strings.TrimSpace(string(machineID)), ca.Serial(leaf)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(serve.CheckedFresh + 100*time.Millisecond)
	body := `{"protocol_version":1,"statuses":[]}`
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", protocol.SyncPath, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a revoked machine's first request after a stale handshake check: %d, want 403", resp.StatusCode)
	}
}

func TestMachineRateLimit(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: 10 * time.Second, limits: serve.Limits{Rate: 1, Burst: 2}})
	_, nw := e.enroll()
	tr := nw.Transport()
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version} // no store ID: answered at once
	for i := range 2 {
		if _, err := tr.Sync(context.Background(), req); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	_, err := tr.Sync(context.Background(), req)
	var he *hubclient.HubError
	if !errors.As(err, &he) || he.Code != http.StatusTooManyRequests || he.RetryAfter < time.Second {
		t.Fatalf("third sync: got %v, want 429 with Retry-After", err)
	}
	// Another machine is not held back by this one.
	_, other := e.enroll()
	if _, err := other.Transport().Sync(context.Background(), req); err != nil {
		t.Errorf("another machine: %v", err)
	}
}

// updateGate holds every write transaction while armed, until released.
type updateGate struct {
	store.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *updateGate) Update(ctx context.Context, fn func(store.Tx) error) error {
	if g.armed.Load() {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.Update(ctx, fn)
}

// Issue 13: overload never turns into a false offline. A machine whose
// request found no active slot within QueueWait is sent away with 503,
// but it spoke: the hub hears it (the presence batch writes its last
// sync), and tells it to come back within a third of OfflineAfter.
func TestMachineSentAwayByOverloadIsHeard(t *testing.T) {
	gate := &updateGate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := startEnv(t, envOptions{
		pollTimeout: 10 * time.Second, offlineAfter: 3 * time.Second,
		limits: serve.Limits{MaxActive: 1, QueueWait: 200 * time.Millisecond, RetryAfter: time.Second},
		wrap:   func(s store.Store) store.Store { gate.Store = s; return gate },
	})
	_, a := e.enroll()
	_, b := e.enroll()
	bID, err := ca.MachineID(b.Transport().Certificate().Leaf)
	if err != nil {
		t.Fatal(err)
	}
	// a's first sync holds the only slot: its report waits on the store.
	gate.armed.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.Transport().Sync(ctx, &protocol.SyncRequest{ProtocolVersion: protocol.Version})
	<-gate.entered
	waitFor(t, 5*time.Second, "a's sync to hold the slot", func() bool { return e.srv.Stats().Requests == 1 })

	_, err = b.Transport().Sync(ctx, &protocol.SyncRequest{ProtocolVersion: protocol.Version})
	var he *hubclient.HubError
	if !errors.As(err, &he) || he.Code != http.StatusServiceUnavailable {
		t.Fatalf("b's sync with the only slot held past QueueWait: %v; want 503", err)
	}
	// Retry-After: from 1 s (RetryAfter) to 5 (jitter's span), as a third
	// of OfflineAfter (1 s) is under that span.
	if he.RetryAfter < time.Second || he.RetryAfter > 5*time.Second {
		t.Fatalf("Retry-After %s, want 1 to 5 s", he.RetryAfter)
	}
	gate.armed.Store(false)
	close(gate.release)
	waitFor(t, 10*time.Second, "the store to hear b, sent away but never synced", func() bool {
		var m store.Machine
		err := e.st.View(context.Background(), func(tx store.Tx) (err error) { m, err = tx.Machine(bID); return err })
		return err == nil && !m.LastSync.IsZero()
	})
}

// Handshakes one after the other share one config: a connection keeps
// the config of its handshake for its life, so a config each would cost
// each connection its own.
func TestHandshakesOneAfterTheOtherShareTheirConfig(t *testing.T) {
	e := startEnv(t, envOptions{})
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: e.ca.Pool(), ServerName: "127.0.0.1"},
		DisableKeepAlives: true,
	}}
	before := e.srv.HandshakeConfigsMade()
	for range 10 {
		if code, body := get(t, client, e.url+"/readyz"); code != http.StatusOK {
			t.Fatalf("/readyz: %d %q", code, body)
		}
	}
	if made := e.srv.HandshakeConfigsMade() - before; made > 1 {
		t.Errorf("10 handshakes one after the other made %d configs, want 1", made)
	}
}
