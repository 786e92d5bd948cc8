package serve_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/serve"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// http1Agent is an enrolled machine's transport over HTTP/1.1, whose
// held polls the hub parks, counting its dials.
type http1Agent struct {
	id    string
	tr    *hubclient.HTTPS
	dials atomic.Int64
	resp  *protocol.SyncResponse
}

// http1Agents enrols n machines and syncs each once over HTTP/1.1.
func http1Agents(t *testing.T, e *env, n int) []*http1Agent {
	t.Helper()
	out := make([]*http1Agent, n)
	for i := range out {
		_, nw := e.enroll()
		id, err := ca.MachineID(nw.Transport().Certificate().Leaf)
		if err != nil {
			t.Fatal(err)
		}
		a := &http1Agent{id: id}
		var d net.Dialer
		tr, err := hubclient.NewHTTPS(hubclient.HTTPSConfig{
			URL: e.url, CA: e.ca.Certificate(), Certificate: *nw.Transport().Certificate(), HTTP1: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				a.dials.Add(1)
				return d.DialContext(ctx, network, addr)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tr.Close)
		a.tr = tr
		if a.resp, err = tr.Sync(t.Context(), &protocol.SyncRequest{ProtocolVersion: protocol.Version}); err != nil {
			t.Fatalf("agent %d, first sync: %v", i, err)
		}
		out[i] = a
	}
	return out
}

// poll starts a's poll at the generation it has; its answer comes on the
// channel.
func (a *http1Agent) poll(ctx context.Context) <-chan error {
	ch := make(chan error, 1)
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: a.resp.StoreID, Generation: a.resp.Generation}
	go func() {
		resp, err := a.tr.Sync(ctx, req)
		if err == nil {
			a.resp = resp
		}
		ch <- err
	}()
	return ch
}

func answered(t *testing.T, what string, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer in 10 s", what)
	}
}

// Held polls parked off net/http (docs/performance.md): a poll held over
// HTTP/1.1 keeps no goroutine in the hub, counts as held, is answered
// when its machine is woken, and its agent polls again on the same
// connection, parked again.
func TestParkedPollsHoldNoGoroutineAndKeepTheirConnection(t *testing.T) {
	const n = 30
	e := startEnv(t, envOptions{pollTimeout: time.Minute, limits: serve.Limits{EnrollRate: 1000, EnrollBurst: n}})
	agents := http1Agents(t, e, n)
	for round := range 2 {
		before := runtime.NumGoroutine()
		polls := make([]<-chan error, n)
		for i, a := range agents {
			polls[i] = a.poll(t.Context())
		}
		// A poll is held in the hub a moment before its connection is
		// parked.
		waitFor(t, 10*time.Second, "the polls to be held and parked", func() bool { return e.hub.WaitingPolls() == n && e.srv.Parked() == n })
		// Each poll adds its caller here; the server keeps none (held,
		// its connection's goroutine and the read in the background
		// would add two more each). The connections' idle goroutines,
		// before, were net/http's: they end when it is taken.
		if more := runtime.NumGoroutine() - before; more > n+10 {
			t.Errorf("round %d: %d polls held, %d goroutines more; want at most %d", round, n, more, n+10)
		}
		for i, a := range agents {
			e.hub.Wake(a.id)
			answered(t, "a woken poll", polls[i])
		}
	}
	for i, a := range agents {
		if d := a.dials.Load(); d != 1 {
			t.Errorf("agent %d dialled %d times; want 1 (its one connection given back after each answer)", i, d)
		}
	}
	if e.srv.Parked() != 0 || e.hub.WaitingPolls() != 0 {
		t.Errorf("%d parked, %d waiting after every poll was answered", e.srv.Parked(), e.hub.WaitingPolls())
	}
}

// A parked poll ends with its hold, unchanged, on its connection.
func TestParkedPollEndsWithItsHold(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: time.Second})
	a := http1Agents(t, e, 1)[0]
	gen := a.resp.Generation
	for range 2 {
		ch := a.poll(t.Context())
		waitFor(t, 5*time.Second, "the poll to be parked", func() bool { return e.srv.Parked() == 1 })
		answered(t, "a parked poll at its hold's end", ch)
		if !a.resp.Unchanged || a.resp.Generation != gen {
			t.Fatalf("answer %+v; want unchanged at generation %d", a.resp, gen)
		}
	}
	if d := a.dials.Load(); d != 1 {
		t.Errorf("dialled %d times; want 1", d)
	}
}

// A newer poll of the machine answers its parked one 409, as a held one.
func TestParkedPollSupersededByANewerOne(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: time.Minute})
	agents := http1Agents(t, e, 1)
	a := agents[0]
	first := a.poll(t.Context())
	waitFor(t, 5*time.Second, "the poll to be parked", func() bool { return e.srv.Parked() == 1 })
	// A second connection of the same machine (another transport).
	second, err := hubclient.NewHTTPS(hubclient.HTTPSConfig{URL: e.url, CA: e.ca.Certificate(), Certificate: *a.tr.Certificate(), HTTP1: true})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	go second.Sync(t.Context(), &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: a.resp.StoreID, Generation: a.resp.Generation})
	select {
	case err := <-first:
		var he *hubclient.HubError
		if !errors.As(err, &he) || he.Code != http.StatusConflict {
			t.Fatalf("older parked poll: got %v, want 409", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the older parked poll kept waiting")
	}
}

// A drain answers parked polls with its directed reconnect.
func TestDrainAnswersParkedPolls(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: time.Minute})
	a := http1Agents(t, e, 1)[0]
	ch := a.poll(t.Context())
	waitFor(t, 5*time.Second, "the poll to be parked", func() bool { return e.srv.Parked() == 1 })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := e.srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ch:
		if !errors.Is(err, hubclient.ErrReconnect) {
			t.Fatalf("parked poll at a drain: %v; want a directed reconnect", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the parked poll was not answered by the drain")
	}
}

// A parked poll whose agent closed its connection ends at once, as a held
// one does, and its machine no longer counts as connected here; where
// nothing tells at once (no Watcher), the sweep ends it.
func TestParkedPollEndsWhenItsAgentLeaves(t *testing.T) {
	for _, watched := range []bool{true, false} {
		e := startEnv(t, envOptions{pollTimeout: time.Minute})
		agents := http1Agents(t, e, 2)
		if !watched {
			e.srv.StopWatching()
		}
		ctx, cancel := context.WithCancel(t.Context())
		left := agents[0].poll(ctx)
		stays := agents[1].poll(t.Context())
		waitFor(t, 5*time.Second, "the polls to be parked", func() bool { return e.srv.Parked() == 2 })
		cancel()
		<-left
		waitFor(t, 5*time.Second, fmt.Sprintf("the poll whose agent left to end (watched %v)", watched), func() bool {
			if !watched {
				e.srv.Sweep()
			}
			return e.srv.Parked() == 1 && e.hub.WaitingPolls() == 1
		})
		e.hub.Wake(agents[1].id)
		answered(t, "the poll of the agent that stayed", stays)
	}
}

// The hub chooses the protocol (agentProtocols): an agent alone offers
// HTTP/1.1 and HTTP/2, and its held poll is parked (over HTTP/1.1, on
// Linux); with replicas to move to it offers only HTTP/2, whose pings
// leave a hung replica, and its poll is held by net/http.
func TestAgentAloneIsParkedAndWithReplicasPingsOverHTTP2(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the hub prefers HTTP/1.1 only where its kernel tells a peer's sign of life (Linux)")
	}
	e := startEnv(t, envOptions{pollTimeout: time.Minute})
	_, nw := e.enroll()
	tr := nw.Transport()
	first, err := tr.Sync(t.Context(), &protocol.SyncRequest{ProtocolVersion: protocol.Version})
	if err != nil {
		t.Fatal(err)
	}
	held := &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: first.StoreID, Generation: first.Generation}
	for _, replicated := range []bool{false, true} {
		tr.SetReplicated(replicated)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { _, err := tr.Sync(ctx, held); done <- err }()
		waitFor(t, 5*time.Second, "the poll to be held", func() bool { return e.hub.WaitingPolls() == 1 })
		if parked := e.srv.Parked() == 1; parked == replicated {
			t.Errorf("replicated %v: parked %v; want %v", replicated, parked, !replicated)
		}
		cancel()
		<-done
		waitFor(t, 5*time.Second, "the poll to end", func() bool { return e.hub.WaitingPolls() == 0 })
	}
}
