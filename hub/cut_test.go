package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

// cutStore hangs every call, once cut, until its context ends or it is
// healed: a store behind a cut cable.
type cutStore struct {
	store.Store
	cut    atomic.Bool
	healed chan struct{}
	// entered is signalled (if not nil) as a call starts to hang.
	entered chan struct{}
}

func newCutStore(st store.Store) *cutStore {
	return &cutStore{Store: st, healed: make(chan struct{})}
}

func (s *cutStore) hang(ctx context.Context) error {
	if !s.cut.Load() {
		return nil
	}
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.healed:
		return nil
	}
}

func (s *cutStore) View(ctx context.Context, fn func(tx store.Tx) error) error {
	if err := s.hang(ctx); err != nil {
		return err
	}
	return s.Store.View(ctx, fn)
}

func (s *cutStore) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	if err := s.hang(ctx); err != nil {
		return err
	}
	return s.Store.Update(ctx, fn)
}

// A poll held by a replica that then loses its store is answered at once
// with ErrNotReady (a 503 that sends the agent to another replica), not
// left waiting on the store for its desired state: the fault first seen
// held the agents on the cut replica (issue 18).
func TestPollOnAReplicaThatLostItsStoreIsSentAway(t *testing.T) {
	h := newTestHub(t)
	cs := newCutStore(h.st)
	h.store = cs
	h.machine("m-1")
	resp := h.sync("m-1", &protocol.SyncRequest{})
	req := protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: resp.StoreID, Generation: resp.Generation}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answered := make(chan error, 1)
	go func() {
		_, err := h.Sync(ctx, "m-1", &req)
		answered <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); !h.polls.connected("m-1"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the poll was never held")
		}
	}
	// The cable is cut; this replica's presence batch fails, and it
	// answers the polls it holds (touchLoop).
	cs.cut.Store(true)
	h.feed.end(h.feed.begin(h.clk.Now(), h.polls.heardAll(h.clk.Now())), errors.New("store: begin: context deadline exceeded"))
	h.polls.wakeEvery()
	select {
	case err := <-answered:
		if !errors.Is(err, ErrNotReady) {
			t.Fatalf("the held poll was answered %v, want ErrNotReady", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held poll still waits on a store that does not answer")
	}
}

// A machine back from a silence long enough to fail its running
// workloads: the timeline of what was failed does not go on to say it
// kept running (the fault first seen said so after a failure), and a
// workload still placed there hears it.
func TestReturnAfterAFailureDoesNotSayItKeptRunning(t *testing.T) {
	h := newTestHub(t)
	started := epoch
	h.machine("m-1")
	h.sync("m-1", &protocol.SyncRequest{BootID: "boot-1", AgentStarted: started})
	failed := h.running("web")
	h.machine("m-2") // keeps syncing: the hub's network is fine
	for step := time.Duration(0); step < h.cfg.OfflineFailAfter; step += 20 * time.Second {
		h.clk.Advance(20 * time.Second)
		h.sync("m-2", &protocol.SyncRequest{})
	}
	h.pass()
	wantState(t, h, failed.ID, store.StateFailed)
	h.sync("m-1", &protocol.SyncRequest{BootID: "boot-1", AgentStarted: started})
	all := timelineText(t, h, failed.ID)
	if !strings.Contains(all, "failed: its machine has been offline for 10 minutes") {
		t.Fatalf("timeline lacks the failure:\n%s", all)
	}
	if strings.Contains(all, "kept running") {
		t.Errorf("timeline of a failed workload says it kept running:\n%s", all)
	}
	if !strings.HasSuffix(all, "machine m-1 was cut off for 10m0s and is back; this workload became failed while it was away, so its machine is told to park it") {
		t.Errorf("timeline does not end saying what the return means for the failed workload:\n%s", all)
	}
}

// A sync that arrives while the store stops answering, before this
// replica's presence batch has failed, is answered ErrNotReady once it has
// waited a batch interval for its report's commit: with the default 45 s
// window the agents of a cut replica otherwise waited on it for a minute
// and more, one commit timeout after another (issue 18). The machine
// counts as connected here while its report waits, and the report is
// written once the store answers.
func TestSyncWhoseReportWaitsOnALostStoreIsSentAway(t *testing.T) {
	// Batches every second: the wait is wall time, like the store's
	// deadlines.
	h := openTestHubWith(t, Config{OfflineAfter: 3 * time.Second})
	cs := newCutStore(h.st)
	h.store = cs
	h.machine("m-1")
	h.sync("m-1", &protocol.SyncRequest{})
	cs.entered = make(chan struct{}, 1)
	cs.cut.Store(true)
	answered := make(chan error, 1)
	go func() {
		_, err := h.Sync(context.Background(), "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, AppliedGeneration: 1})
		answered <- err
	}()
	<-cs.entered
	select {
	case err := <-answered:
		if !errors.Is(err, ErrNotReady) {
			t.Fatalf("answered %v, want ErrNotReady", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sync still waits on a store that does not answer")
	}
	if !h.polls.connected("m-1") {
		t.Error("the machine does not count as connected while its report waits in this hub's queue")
	}
	cs.cut.Store(false)
	close(cs.healed)
	for deadline := time.Now().Add(10 * time.Second); h.polls.connected("m-1"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the report was never written after the heal")
		}
	}
	if m := h.machineRow("m-1"); m.AppliedGeneration != 1 {
		t.Errorf("after the heal the machine's applied generation is %d, want the waiting report's 1", m.AppliedGeneration)
	}
}

// Every request of an agent checks its certificate in the store first: a
// replica whose store does not answer refuses it as its own failure
// (ErrNotReady, a 503 that moves the agent) when the store fails or times
// out, and at once while its presence batch fails; never as the certificate's
// fault (a 4xx would keep the agent on this replica).
func TestCertificateCheckOnALostStoreIsTheHubsFailure(t *testing.T) {
	h := newTestHub(t)
	cs := newCutStore(h.st)
	h.store = cs
	cs.cut.Store(true)
	// The caller's deadline stands in for the presence batch interval
	// (15 s here) that bounds the check too.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	checked := make(chan error, 1)
	go func() { checked <- h.CheckCertificate(ctx, "m-1", "0a") }()
	select {
	case err := <-checked:
		if !errors.Is(err, ErrNotReady) || errors.Is(err, ErrRevoked) {
			t.Fatalf("certificate check on a store that does not answer: %v, want ErrNotReady", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the certificate check still waits on a store that does not answer")
	}
	h.feed.end(h.feed.begin(h.clk.Now(), nil), errors.New("store: begin: context deadline exceeded"))
	cs.entered = make(chan struct{}, 1)
	if err := h.CheckCertificate(context.Background(), "m-1", "0a"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("certificate check while the presence batch fails: %v, want ErrNotReady", err)
	}
	select {
	case <-cs.entered:
		t.Error("the certificate check went to the store while this replica's presence batch fails")
	default:
	}
}

// openTestHubWith opens a test hub on a fake clock with cfg's durations.
func openTestHubWith(t *testing.T, cfg Config) *testHub {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hub.db")
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := clock.NewFake(epoch)
	cfg.AllowSim, cfg.Store, cfg.Clock, cfg.Logger = true, st, clk, slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &testHub{Hub: h, t: t, clk: clk, path: path, st: st}
}

// TestRule8_HubDowntimeIsNoCutOff: the hub's own downtime never counts
// against a machine. One that synced just before the hub went down, and
// syncs again once it is back (its agent waiting its share of the
// reconnect window), OfflineAfter after its last sync in all, is not said
// on its workloads' timelines to have been cut off; one this hub missed
// for OfflineAfter is.
func TestRule8_HubDowntimeIsNoCutOff(t *testing.T) {
	h := newTestHub(t)
	started := epoch
	h.machine("m-1")
	h.sync("m-1", &protocol.SyncRequest{BootID: "boot-1", AgentStarted: started})
	w := h.running("web")
	h.clk.Advance(30 * time.Second) // the hub is down
	h2 := openTestHub(t, h.path, h.clk)
	h.clk.Advance(20 * time.Second)
	h2.sync("m-1", &protocol.SyncRequest{BootID: "boot-1", AgentStarted: started})
	if all := timelineText(t, h2, w.ID); strings.Contains(all, "cut off") {
		t.Fatalf("after the hub's restart the timeline says its machine was cut off:\n%s", all)
	}
	h.clk.Advance(h2.cfg.OfflineAfter)
	h2.sync("m-1", &protocol.SyncRequest{BootID: "boot-1", AgentStarted: started})
	want := fmt.Sprintf("machine m-1 was cut off for %s and is back", h2.cfg.OfflineAfter)
	if all := timelineText(t, h2, w.ID); !strings.Contains(all, want) {
		t.Errorf("the timeline lacks %q after the hub missed m-1 that long:\n%s", want, all)
	}
}

// timelineText is workload id's timeline, a line an entry.
func timelineText(t *testing.T, h *testHub, id string) string {
	t.Helper()
	es, err := h.Timeline(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, e := range es {
		texts = append(texts, e.Text)
	}
	return strings.Join(texts, "\n")
}
