package postgres

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Two hub replicas on one database: a change placed by the leader reaches
// the long poll held by the other through NOTIFY, and a report recorded by
// the other reaches the leader's controller the same way. No presence
// table.
func TestHubReplicasWakeEachOther(t *testing.T) {
	dsn := testDSN(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	newHub := func(holder string) *hub.Hub {
		h, err := hub.New(ctx, hub.Config{AllowSim: true, Store: open(t, dsn), Logger: log, HolderID: holder,
			PollTimeout: time.Minute, ControllerInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a, b := newHub("hub-a"), newHub("hub-b")
	must(t, a.CreateTenant(ctx, "local"))
	must(t, a.RegisterMachine(ctx, "m-1", "m-1", "local", "local"))
	inv := &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 16384, Drivers: []string{"sim"}}
	first, err := b.Sync(ctx, "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, Inventory: inv})
	must(t, err)

	done := make(chan struct{}, 2)
	for _, h := range []*hub.Hub{a, b} {
		go func() { h.Run(ctx); done <- struct{}{} }()
	}
	defer func() { cancel(); <-done; <-done }()
	var leader, follower *hub.Hub
	deadline := time.Now().Add(10 * time.Second)
	for leader == nil {
		if la, _ := a.Leadership(); la {
			leader, follower = a, b
		} else if lb, _ := b.Leadership(); lb {
			leader, follower = b, a
		}
		if time.Now().After(deadline) {
			t.Fatal("no replica took the lease")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The agent's poll waits on the follower.
	got := make(chan *protocol.SyncResponse, 1)
	go func() {
		resp, err := follower.Sync(ctx, "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version,
			StoreID: first.StoreID, Generation: first.Generation})
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	time.Sleep(100 * time.Millisecond) // let the poll reach its wait
	w, err := leader.CreateWorkload(ctx, hub.WorkloadSpec{Tenant: "local", Name: "web", Kind: protocol.KindContainer, Class: "cpu-1", Region: "local"})
	must(t, err)
	var resp *protocol.SyncResponse
	select {
	case resp = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the follower's poll was not woken by the leader's placement")
	}
	if resp.Unchanged || len(resp.Workloads) != 1 || resp.Workloads[0].ID != w.ID {
		t.Fatalf("got %+v, want the placed workload", resp)
	}

	// The agent reports running to the follower; the leader observes it.
	d := resp.Workloads[0]
	_, err = follower.Sync(ctx, "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version,
		Statuses: []protocol.Status{{Workload: d.ID, Attempt: d.Attempt, Mode: d.Mode, Generation: resp.Generation, Code: protocol.CodeRunning}}})
	must(t, err)
	deadline = time.Now().Add(20 * time.Second)
	for {
		got, err := leader.Workload(ctx, w.ID)
		must(t, err)
		if got.State == store.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader did not observe the report made to the follower: %s", got.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
