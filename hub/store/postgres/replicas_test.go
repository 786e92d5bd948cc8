package postgres

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/hubtest"
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

	// The agent's poll waits on the follower. The follower may answer it
	// once with nothing new (it wakes every held poll after its first
	// LISTEN, since it may have missed a notification before); the agent
	// polls again, as agents do.
	got := make(chan *protocol.SyncResponse, 1)
	go func() {
		gen := first.Generation
		for {
			resp, err := follower.Sync(ctx, "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version,
				StoreID: first.StoreID, Generation: gen})
			if err != nil {
				t.Error(err)
				got <- nil
				return
			}
			if resp.Unchanged || len(resp.Workloads) == 0 && ctx.Err() == nil {
				gen = max(gen, resp.Generation)
				continue
			}
			got <- resp
			return
		}
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
	if resp == nil || resp.Unchanged || len(resp.Workloads) != 1 || resp.Workloads[0].ID != w.ID {
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

// A backlog of waiting workloads that fit nowhere delays neither the
// placement of one that fits nor the lease (issue 18).
func TestBacklogDelaysNeitherPlacementNorLease(t *testing.T) {
	n := 100_000
	if testing.Short() || raceEnabled {
		n = 3000
	}
	hubtest.Backlog(t, open(t, testDSN(t)), n)
}

// A create on a standby wakes the leader through the store's
// notifications: it is placed long before the leader's own tick (issue
// 18).
func TestCreateOnAStandbyWakesTheLeader(t *testing.T) {
	ctx, standby := standbyOfTwo(t, 8, 16384)

	start := time.Now()
	w, err := standby.CreateWorkload(ctx, hub.WorkloadSpec{Tenant: "local", Name: "web", Kind: protocol.KindContainer, Class: "cpu-1", Region: "local"})
	must(t, err)
	for {
		got, err := standby.Workload(ctx, w.ID)
		must(t, err)
		if got.State == store.StateProvisioning {
			break
		}
		if time.Since(start) > standbyTick/6 {
			t.Fatalf("created on the standby, still %s after %v: the leader was not woken", got.State, time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("created on the standby, placed by the leader in %v", time.Since(start).Round(time.Millisecond))
}

// Presence is shared: with a poll timeout twice OfflineAfter (90 s against
// 45 s, scaled down here), polls held by the other replicas keep their
// machines online in the leader's eyes (issue 18).
func TestPresenceAcrossReplicasWithLongPolls(t *testing.T) {
	dsn := testDSN(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const offlineAfter = 3 * time.Second
	var hubs []*hub.Hub
	for _, holder := range []string{"hub-a", "hub-b", "hub-c"} {
		h, err := hub.New(ctx, hub.Config{AllowSim: true, Store: open(t, dsn), Logger: log, HolderID: holder,
			PollTimeout: 2 * offlineAfter, OfflineAfter: offlineAfter, OfflineFailAfter: 4 * time.Second,
			ControllerInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		hubs = append(hubs, h)
	}
	must(t, hubs[0].CreateTenant(ctx, "local"))
	inv := &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 16384, Drivers: []string{"sim"}}
	const machines = 6
	for i := range machines {
		id := fmt.Sprintf("m-%d", i)
		must(t, hubs[0].RegisterMachine(ctx, id, id, "local", "local"))
	}
	done := make(chan struct{}, len(hubs))
	for _, h := range hubs {
		go func() { h.Run(ctx); done <- struct{}{} }()
	}
	defer func() {
		cancel()
		for range hubs {
			<-done
		}
	}()
	var leader *hub.Hub
	var others []*hub.Hub
	for deadline := time.Now().Add(10 * time.Second); leader == nil; time.Sleep(10 * time.Millisecond) {
		for i, h := range hubs {
			if l, _ := h.Leadership(); l {
				leader = h
				others = append(append(others, hubs[:i]...), hubs[i+1:]...)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no replica took the lease")
		}
	}
	// Each agent polls one of the other replicas, as a load balancer
	// spread them, and holds its poll there for twice OfflineAfter.
	for i := range machines {
		id, h := fmt.Sprintf("m-%d", i), others[i%len(others)]
		go func() {
			// Its own inventory: the hub sanitises a report's strings in
			// place, as it decodes each request's anew.
			own := *inv
			own.Drivers = slices.Clone(inv.Drivers)
			req := &protocol.SyncRequest{ProtocolVersion: protocol.Version, Inventory: &own}
			for ctx.Err() == nil {
				resp, err := h.Sync(ctx, id, req)
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				req = &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: resp.StoreID, Generation: resp.Generation}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // every first sync is in
	for end := time.Now().Add(4 * offlineAfter); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		ms, err := leader.Machines(ctx)
		must(t, err)
		for _, m := range ms {
			if !m.Online {
				t.Fatalf("the leader sees %s offline, last sync %v ago, while another replica holds its poll", m.ID, time.Since(m.LastSync).Round(time.Millisecond))
			}
		}
	}
}

// A change on a standby that frees capacity without a new mode (a
// stopping workload asked to run again goes to pending, parked either way)
// names its machine to the leader, whose capacity view reads it again
// (issue 13): with a stale view the leader would see the workload still
// holding its machine and queue it.
func TestStandbyChangeReachesTheLeadersCapacityView(t *testing.T) {
	ctx, standby := standbyOfTwo(t, 2, 8192)

	// Waits, bounded well inside the view's full check (15 s), for w to be
	// in state want.
	waitFor := func(id string, want store.State, what string) {
		t.Helper()
		start := time.Now()
		for {
			got, err := standby.Workload(ctx, id)
			must(t, err)
			if got.State == want {
				return
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s: still %s (%s) after %v, want %s", what, got.State, got.Reason, time.Since(start), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	w, err := standby.CreateWorkload(ctx, hub.WorkloadSpec{Tenant: "local", Name: "web", Kind: protocol.KindContainer, Class: "cpu-2", Region: "local"})
	must(t, err)
	waitFor(w.ID, store.StateProvisioning, "created on the standby")
	must(t, standby.ParkWorkload(ctx, w.ID))
	waitFor(w.ID, store.StateStopping, "parked on the standby")
	// Work that fits nowhere makes the leader read its capacity now, so
	// its view holds the stopping workload when it is asked to run.
	gpu, err := standby.CreateWorkload(ctx, hub.WorkloadSpec{Tenant: "local", Name: "gpu", Kind: protocol.KindContainer, Class: "nvidia-1", Region: "local"})
	must(t, err)
	waitFor(gpu.ID, store.StateQueued, "a GPU workload on a machine without one")
	must(t, standby.RunWorkload(ctx, w.ID))
	waitFor(w.ID, store.StateProvisioning, "run again on the standby while stopping")
}

// standbyTick is the controller's tick in standbyOfTwo: long, so only
// notifications wake the leader in time.
const standbyTick = 30 * time.Second

// standbyOfTwo runs two hubs on one store with standbyTick, one machine m-1 of
// cpus and memoryMB synced, and returns the one standing by once the
// other leads and has made its first pass. Both stop when t ends.
func standbyOfTwo(t *testing.T, cpus, memoryMB int) (context.Context, *hub.Hub) {
	t.Helper()
	dsn := testDSN(t)
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	newHub := func(holder string) *hub.Hub {
		h, err := hub.New(ctx, hub.Config{AllowSim: true, Store: open(t, dsn), Logger: log, HolderID: holder,
			PollTimeout: time.Minute, ControllerInterval: standbyTick})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a, b := newHub("hub-a"), newHub("hub-b")
	must(t, a.CreateTenant(ctx, "local"))
	must(t, a.RegisterMachine(ctx, "m-1", "m-1", "local", "local"))
	inv := &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: cpus, MemoryMB: memoryMB, Drivers: []string{"sim"}}
	_, err := a.Sync(ctx, "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, Inventory: inv})
	must(t, err)
	done := make(chan struct{}, 2)
	for _, h := range []*hub.Hub{a, b} {
		go func() { h.Run(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() { cancel(); <-done; <-done })
	var standby *hub.Hub
	deadline := time.Now().Add(10 * time.Second)
	for standby == nil {
		if la, _ := a.Leadership(); la {
			standby = b
		} else if lb, _ := b.Leadership(); lb {
			standby = a
		}
		if time.Now().After(deadline) {
			t.Fatal("no replica took the lease")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the leader's first pass is over
	return ctx, standby
}
