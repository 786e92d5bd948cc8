package fleetbench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// parkedAgent is one client of the parked baseline, counting its dials.
type parkedAgent struct {
	tr    *hubclient.HTTPS
	dials atomic.Int32
}

func (a *parkedAgent) sync(ctx context.Context, gen int64) (*protocol.SyncResponse, error) {
	return a.tr.Sync(ctx, &protocol.SyncRequest{ProtocolVersion: protocol.Version, AgentVersion: "test", Generation: gen, AppliedGeneration: gen})
}

// startParkedBaseline serves the parked baseline in this process, with n
// agents that have synced once (generation 1) over HTTP/1.1.
func startParkedBaseline(t *testing.T, n int) (*baseline, []*parkedAgent) {
	t.Helper()
	dir := t.TempDir()
	b := newBaselineTarget("", dir, true)
	if err := b.makeCA(); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(b.ca)
	s := newBaseline(true)
	srv := s.server(cert, pool)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ln, "", "")
	s.serveParked(srv, ln.Addr())
	agents := make([]*parkedAgent, n)
	for i := range agents {
		c, err := b.issue(strconv.Itoa(i), x509.ExtKeyUsageClientAuth)
		if err != nil {
			t.Fatal(err)
		}
		a := &parkedAgent{}
		var d net.Dialer
		a.tr, err = hubclient.NewHTTPS(hubclient.HTTPSConfig{
			URL: "https://" + ln.Addr().String(), CA: b.ca, Certificate: c, HTTP1: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				a.dials.Add(1)
				return d.DialContext(ctx, network, addr)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := a.sync(t.Context(), 0); err != nil || resp.Generation != 1 {
			t.Fatalf("agent %d, first sync: %+v, %v", i, resp, err)
		}
		agents[i] = a
	}
	t.Cleanup(func() {
		for _, a := range agents {
			a.tr.Close()
		}
		close(s.closed)
		srv.Close()
	})
	return s, agents
}

// poll starts a's poll at generation gen; its answer comes on the channel.
func poll(ctx context.Context, a *parkedAgent, gen int64) <-chan *protocol.SyncResponse {
	ch := make(chan *protocol.SyncResponse, 1)
	go func() {
		resp, _ := a.sync(ctx, gen)
		ch <- resp
	}()
	return ch
}

func parkedCount(s *baseline) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parked)
}

// waitFor waits up to 5 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("after 5 s: %s", what)
		}
	}
}

// A parked poll is held by no goroutine of the server's: held polls cost
// the server's goroutines nothing, where net/http's HTTP/1.1 server runs two
// for each (the connection's and its read in the background). Woken, the
// poll is answered and the agent's next poll goes on the same connection.
func TestParkedPollsHoldNoGoroutineAndKeepTheirConnection(t *testing.T) {
	const n = 40
	s, agents := startParkedBaseline(t, n)
	// Each agent's connection is served, idle, by one goroutine of
	// net/http's; the agents' own goroutines are counted too.
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	answers := make([]<-chan *protocol.SyncResponse, n)
	for i, a := range agents {
		answers[i] = poll(ctx, a, 1)
	}
	waitFor(t, "every poll parked", func() bool { return parkedCount(s) == n })
	// n polling goroutines in this test, n goroutines of net/http's gone:
	// the same count. Held by the server, it would be 2n more.
	for end := time.Now().Add(5 * time.Second); runtime.NumGoroutine()-before > n/4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d polls parked: %d goroutines more than before them, want none a held poll", n, runtime.NumGoroutine()-before)
		}
	}

	s.mu.Lock()
	s.setLocked("3", "w", protocol.ModeRun)
	s.mu.Unlock()
	select {
	case resp := <-answers[3]:
		if resp == nil || resp.Generation != 2 || len(resp.Workloads) != 1 || resp.Workloads[0].ID != "w" {
			t.Fatalf("woken poll's answer: %+v", resp)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the changed machine's parked poll was not answered")
	}
	if got := parkedCount(s); got != n-1 {
		t.Fatalf("%d polls parked after one was answered, want %d", got, n-1)
	}
	// The next poll, on the connection given back to net/http, ends at the
	// hold, unchanged.
	s.mu.Lock()
	s.hold = 50 * time.Millisecond
	s.mu.Unlock()
	select {
	case resp := <-poll(ctx, agents[3], 2):
		if resp == nil || !resp.Unchanged || resp.Generation != 2 {
			t.Fatalf("poll at its hold's end: %+v", resp)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a parked poll outlived its hold")
	}
	if d := agents[3].dials.Load(); d != 1 {
		t.Fatalf("agent 3 dialled %d times, want its one connection kept across parked polls", d)
	}
}

// A parked poll whose agent has gone (here: cancelled its poll, which
// closes an HTTP/1.1 connection) is dropped by the sweep, as net/http's
// read in the background would notice; the others stay parked.
func TestSweepDropsParkedPollsWhosePeerHasGone(t *testing.T) {
	s, agents := startParkedBaseline(t, 3)
	keep, cancelKeep := context.WithCancel(t.Context())
	defer cancelKeep()
	gone, cancelGone := context.WithCancel(t.Context())
	poll(keep, agents[0], 1)
	poll(keep, agents[1], 1)
	goneAnswer := poll(gone, agents[2], 1)
	waitFor(t, "three polls parked", func() bool { return parkedCount(s) == 3 })
	s.sweep()
	if got := parkedCount(s); got != 3 {
		t.Fatalf("the sweep dropped %d live polls", 3-got)
	}
	cancelGone()
	<-goneAnswer
	waitFor(t, "the gone agent's poll dropped by the sweep", func() bool {
		s.sweep()
		return parkedCount(s) == 2
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.machines["2"].parked != nil || s.machines["0"].parked == nil {
		t.Fatal("the sweep dropped the wrong poll")
	}
}
