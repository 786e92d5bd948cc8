package hub

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

// sharedStore is a store for replicas to share, on a SQLite file, and a
// fake clock for them.
func sharedStore(t *testing.T) (*sqlite.Store, *clock.Fake) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, clock.NewFake(epoch)
}

// replicaOn is a hub with url over st: a replica sharing the store.
func replicaOn(t *testing.T, st store.Store, clk clock.Clock, url string) *Hub {
	t.Helper()
	h, err := New(context.Background(), Config{AllowSim: true, Store: st, Clock: clk, URL: url, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func refresh(t *testing.T, hs ...*Hub) {
	t.Helper()
	for _, h := range hs {
		if err := h.RefreshReplicas(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReplicasPublishTheirURLs: each replica sends the live ones, itself
// first; one not heard of for ReplicaLive is dropped.
func TestReplicasPublishTheirURLs(t *testing.T) {
	st, clk := sharedStore(t)
	a := replicaOn(t, st, clk, "https://a.example:8443")
	b := replicaOn(t, st, clk, "https://b.example:8443")
	quiet := replicaOn(t, st, clk, "") // behind a load balancer: publishes nothing
	refresh(t, a, b, quiet)
	refresh(t, a)
	if got := fmt.Sprint(a.Hubs()); got != "[https://a.example:8443 https://b.example:8443]" {
		t.Errorf("a sends %s", got)
	}
	if got := fmt.Sprint(b.Hubs()); got != "[https://b.example:8443 https://a.example:8443]" {
		t.Errorf("b sends %s, want itself first", got)
	}
	if got := fmt.Sprint(quiet.Hubs()); got != "[https://a.example:8443 https://b.example:8443]" {
		t.Errorf("a replica without a URL sends %s", got)
	}
	// b stops; a goes on refreshing.
	for range 4 {
		clk.Advance(ReplicaRefresh)
		refresh(t, a)
	}
	if got := fmt.Sprint(a.Hubs()); got != "[https://a.example:8443]" {
		t.Errorf("after b stopped, a sends %s", got)
	}
	var n int
	st.View(context.Background(), func(tx store.Tx) error {
		all, err := tx.Replicas(time.Time{}, 2*MaxReplicas)
		n = len(all)
		return err
	})
	if n != 1 {
		t.Errorf("%d replicas recorded, want b pruned", n)
	}
}

// heldAfterCommit is a store whose Update, once armed, returns only when
// released, after its commit.
type heldAfterCommit struct {
	store.Store
	armed   atomic.Bool
	held    chan struct{} // closed when the armed Update has committed
	release chan struct{}
}

func (s *heldAfterCommit) Update(ctx context.Context, fn func(store.Tx) error) error {
	err := s.Store.Update(ctx, fn)
	if s.armed.CompareAndSwap(true, false) {
		close(s.held)
		<-s.release
	}
	return err
}

// TestAnOlderRefreshNeverSetsItsListLast: two refreshes of a replica at
// once (its loop's and a drain's) set their lists in turn, so one that
// read the store before another replica published is not the last word.
func TestAnOlderRefreshNeverSetsItsListLast(t *testing.T) {
	st, clk := sharedStore(t)
	held := &heldAfterCommit{Store: st, held: make(chan struct{}), release: make(chan struct{})}
	a := replicaOn(t, held, clk, "https://a.example:8443")
	b := replicaOn(t, st, clk, "https://b.example:8443")
	run := func() {
		if err := a.RefreshReplicas(context.Background()); err != nil {
			t.Error(err)
		}
	}
	var refreshes sync.WaitGroup
	held.armed.Store(true)
	refreshes.Go(run) // reads the store before b publishes
	<-held.held
	refresh(t, b)
	second := make(chan struct{})
	refreshes.Go(func() { run(); close(second) })
	select {
	case <-second: // not in turn: the second set its list first
	case <-time.After(200 * time.Millisecond): // in turn: it waits for the first
	}
	close(held.release)
	refreshes.Wait()
	if got := fmt.Sprint(a.Hubs()); got != "[https://a.example:8443 https://b.example:8443]" {
		t.Errorf("after both refreshes a sends %s, want b too", got)
	}
}

// TestReplicaRegistryIsBounded: past MaxReplicas rows, a new replica is
// not recorded.
func TestReplicaRegistryIsBounded(t *testing.T) {
	st, clk := sharedStore(t)
	err := st.Update(context.Background(), func(tx store.Tx) error {
		for i := range MaxReplicas {
			if err := tx.PutReplica(store.Replica{URL: fmt.Sprintf("https://r%02d.example:8443", i), Seen: epoch}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	late := replicaOn(t, st, clk, "https://late.example:8443")
	refresh(t, late)
	var n int
	st.View(context.Background(), func(tx store.Tx) error {
		all, err := tx.Replicas(time.Time{}, 2*MaxReplicas)
		n = len(all)
		return err
	})
	if n != MaxReplicas {
		t.Errorf("%d replicas recorded, want at most %d", n, MaxReplicas)
	}
	if got := late.Hubs(); len(got) != protocol.MaxHubs || got[0] != "https://late.example:8443" {
		t.Errorf("sends %d URLs starting %v, want %d, itself first", len(got), got[:1], protocol.MaxHubs)
	}
}

// TestSyncSendsHubsOnlyWhenTheAgentLacksThem: the list rides on an answer
// when the agent's digest differs, and never on one when it matches, so an
// idle poll stays small.
func TestSyncSendsHubsOnlyWhenTheAgentLacksThem(t *testing.T) {
	h := newTestHub(t)
	h.cfg.URL = "https://a.example:8443"
	refresh(t, h.Hub)
	h.machine("m-1")
	d := h.desired("m-1")
	// Naming no store: answered at once with desired state and the list.
	resp := h.sync("m-1", &protocol.SyncRequest{})
	if fmt.Sprint(resp.Hubs) != "[https://a.example:8443]" {
		t.Fatalf("got hubs %v, want this replica's URL", resp.Hubs)
	}
	if cached := h.desired("m-1"); cached.Hubs != nil {
		t.Errorf("the cached desired state was changed: %v", cached.Hubs)
	}
	resp = h.sync("m-1", &protocol.SyncRequest{HubsDigest: protocol.HubsDigest(resp.Hubs)})
	if resp.Hubs != nil {
		t.Errorf("an agent that has the list got it again: %v", resp.Hubs)
	}
	// A held poll answered at its timeout carries it too.
	got := make(chan *protocol.SyncResponse, 1)
	go func() {
		r, _ := h.Sync(context.Background(), "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: d.StoreID, Generation: d.Generation})
		got <- r
	}()
	waitTimers(t, h.clk, 1)
	h.clk.Advance(time.Hour)
	if r := <-got; !r.Unchanged || len(r.Hubs) != 1 {
		t.Errorf("unchanged answer: got %+v, want the list on it", r)
	}
}
