package serve_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/serve"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/storetest"
	"einsora.dev/edge/internal/syncbuf"
	"einsora.dev/edge/protocol"
)

// replica is one hub process of several over one store, serving agents on
// its own address with real TLS.
type replica struct {
	url    string
	hub    *hub.Hub
	srv    *serve.Server
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// loggerTo logs to w, each line marked with who.
func loggerTo(w io.Writer, who string) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, nil)).With("who", who)
}

func startReplica(t *testing.T, st store.Store, hubCA *ca.CA) *replica {
	return startReplicaLogging(t, st, hubCA, discard)
}

func startReplicaLogging(t *testing.T, st store.Store, hubCA *ca.CA, log *slog.Logger) *replica {
	t.Helper()
	ln, err := serve.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{url: "https://" + ln.Addr().String()}
	r.hub, err = hub.New(context.Background(), hub.Config{
		Store: st, CA: hubCA, Logger: log, PollTimeout: 5 * time.Second, Region: "r1", AllowSim: true,
		ControllerInterval: 200 * time.Millisecond, LeaseTTL: time.Second, URL: r.url,
	})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := hubCA.ServerCertificate([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = serve.NewServer(serve.Config{Hub: r.hub, CA: hubCA, Certificate: cert, Logger: discard, PollTimeout: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done.Go(func() { r.hub.Run(ctx) })
	r.done.Go(func() { r.srv.Serve(ln) })
	t.Cleanup(r.stop)
	return r
}

// stop stops the replica abruptly, as a crash would.
func (r *replica) stop() {
	r.srv.Close()
	r.cancel()
	r.done.Wait()
}

// TestAgentLearnsAReplicaAndMovesToIt: an agent enrolled with replica A
// and told of no other learns B's URL from A's answer; when A stops, it
// syncs with B, which its command line never named, and runs what B
// places.
func TestAgentLearnsAReplicaAndMovesToIt(t *testing.T) {
	dir, hubCA, st := serve.NewCAAndStore(t)
	logs := &syncbuf.Buffer{}
	a := startReplicaLogging(t, st, hubCA, loggerTo(logs, "A"))
	b := startReplicaLogging(t, st, hubCA, loggerTo(logs, "B"))
	ctx := context.Background()
	// Run refreshes on its own timer; here each replica has seen the
	// other before the agent enrols.
	for _, r := range []*replica{b, a} {
		if err := r.hub.RefreshReplicas(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.hub.EnsureTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	tok, _, err := a.hub.CreateEnrollToken(ctx, "acme", "r1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(dir, "agent")
	if _, err := agent.Enroll(ctx, agent.EnrollOptions{StateDir: stateDir, HubURL: a.url, Token: tok.String()}); err != nil {
		t.Fatal(err)
	}
	if got, err := agent.ReadStatus(stateDir); err != nil || !slices.Contains(got.Hubs, b.url) {
		t.Fatalf("after enrolment the agent knows %v (%v), want B %s among them", got.Hubs, err, b.url)
	}

	actx, stopAgent := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Go(func() {
		err := agent.RunNetworked(actx, agent.NetworkedConfig{
			StateDir: stateDir, Drivers: "sim", Logger: loggerTo(logs, "agent"),
			Inventory: func(context.Context) protocol.Inventory { return testInventory() },
		})
		if err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { stopAgent(); running.Wait() })
	waitFor(t, 15*time.Second, "the agent's first sync", func() bool {
		s, err := agent.ReadStatus(stateDir)
		return err == nil && s.StoreID != ""
	})

	a.stop()
	w, err := b.hub.CreateWorkload(ctx, hub.WorkloadSpec{
		Tenant: "acme", Name: "web", Kind: protocol.KindContainer, Class: "cpu-1", Region: "r1", Image: "sim:",
	})
	if err != nil {
		t.Fatal(err)
	}
	// B learns of the machine enrolled through A from its sweep (every
	// 15 s; SQLite carries no notifications between them), or at once
	// when it takes the lead from A, and the agent moves within A's
	// reconnect window: under a loaded race run that can take two sweeps.
	// Twice a make test saw a minute pass; the full check of B's view
	// (every 2 minutes) would find it then. The logs say which, when it
	// fails or takes more than two sweeps.
	created := time.Now()
	var took time.Duration
	t.Cleanup(func() {
		if t.Failed() || took > 30*time.Second {
			t.Logf("the workload placed by B ran %s after A stopped (0: not at all); the hubs' and the agent's logs:\n%s", took.Round(time.Second), logs)
		}
	})
	waitFor(t, 150*time.Second, "the workload placed by B to run", func() bool {
		got, err := b.hub.Workload(ctx, w.ID)
		return err == nil && got.State == store.StateRunning
	})
	took = time.Since(created)
	if s, _ := agent.ReadStatus(stateDir); s.Hub != a.url {
		t.Errorf("the agent's enrolment names %s, want A %s still: it moved by what it learned", s.Hub, a.url)
	}
}

// A draining replica tells the others it is going before it stops: its
// registry row carries no count, so none of them sends it agents to even
// out the fleet (hub.Leave).
func TestDrainingReplicaPublishesNoCount(t *testing.T) {
	_, hubCA, st := serve.NewCAAndStore(t)
	r := startReplica(t, st, hubCA)
	ctx := context.Background()
	polls := func() int { return storetest.ReplicaPolls(t, st, r.url) }
	for range 2 { // the first is in flux
		if err := r.hub.RefreshReplicas(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := polls(); got != 0 {
		t.Fatalf("a running replica published %d polls, want 0", got)
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.srv.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	if got := polls(); got != -1 {
		t.Errorf("a drained replica published %d polls, want none (-1)", got)
	}
}
