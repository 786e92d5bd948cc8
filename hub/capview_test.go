package hub

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Issue 13: the capacity view admission keeps up to date per change must
// agree with a full read of the store after every change, on randomised
// fleets: machines joining with random inventories (some in another
// region), workloads created, placed, run, parked, rerun and deleted,
// reports that free capacity, inventories that change, machines going
// silent by the clock (their workloads failed by the sweep) and revoked.
func TestIncrementalAndFullCapacityAgree(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { randomFleet(t, seed, 250) })
	}
}

func randomFleet(t *testing.T, seed uint64, steps int) {
	h := newTestHub(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 13))
	if err := h.EnsureTenant(ctx, "local"); err != nil {
		t.Fatal(err)
	}
	var machines, revoked []string
	var workloads []string
	inventory := func() *protocol.Inventory {
		inv := testInventory()
		inv.CPUs, inv.MemoryMB = 1+r.IntN(8), 2048*(1+r.IntN(8))
		return inv
	}
	live := func() []string {
		return slices.DeleteFunc(slices.Clone(machines), func(id string) bool { return slices.Contains(revoked, id) })
	}
	pick := func(ids []string) string { return ids[r.IntN(len(ids))] }
	check := func(step int, op string) {
		t.Helper()
		diffs, err := h.ctl.checkCapacity(ctx)
		if err != nil {
			t.Fatalf("step %d (%s): %v", step, op, err)
		}
		for _, d := range diffs {
			t.Errorf("step %d (%s): machine %s: %s", step, op, d.Machine, d.What)
		}
		if len(diffs) > 0 {
			t.FailNow()
		}
	}
	h.pass()
	check(-1, "start")
	for step := range steps {
		var op string
		switch k := r.IntN(100); {
		case k < 12 || len(machines) < 2:
			op = "register"
			id := fmt.Sprintf("m-%d", len(machines))
			region := "local"
			if r.IntN(6) == 0 {
				region = "elsewhere"
			}
			if err := h.RegisterMachine(ctx, id, id, "local", region); err != nil {
				t.Fatal(err)
			}
			machines = append(machines, id)
			h.sync(id, &protocol.SyncRequest{Inventory: inventory()})
			h.pass()
		case k < 35:
			op = "create"
			class := []string{"cpu-1", "cpu-2", "cpu-4"}[r.IntN(3)]
			w, err := h.CreateWorkload(ctx, WorkloadSpec{Tenant: "local", Name: fmt.Sprint("w", step), Kind: protocol.KindContainer, Class: class, Region: "local", Image: "sim:"})
			if err != nil {
				t.Fatal(err)
			}
			workloads = append(workloads, w.ID)
			h.pass()
		case k < 55:
			// An agent applies its desired state: it runs what is to run
			// (or fails it), stops what is parked, removes what goes.
			op = "report"
			ids := live()
			if len(ids) == 0 {
				continue
			}
			id := pick(ids)
			d := h.desired(id)
			var sts []protocol.Status
			for _, dw := range d.Workloads {
				code := map[protocol.Mode]protocol.Code{protocol.ModeRun: protocol.CodeRunning, protocol.ModePark: protocol.CodeStopped, protocol.ModeRemove: protocol.CodeRemoved}[dw.Mode]
				if dw.Mode == protocol.ModeRun && r.IntN(5) == 0 {
					code = protocol.CodeOOMKilled
				}
				sts = append(sts, protocol.Status{Workload: dw.ID, Attempt: dw.Attempt, Mode: dw.Mode, Code: code})
			}
			h.report(id, d, sts...)
		case k < 63:
			op = "park"
			if len(workloads) == 0 {
				continue
			}
			if err := h.ParkWorkload(ctx, pick(workloads)); err != nil && !isGone(err) {
				t.Fatal(err)
			}
			h.pass()
		case k < 71:
			op = "run"
			if len(workloads) == 0 {
				continue
			}
			if err := h.RunWorkload(ctx, pick(workloads)); err != nil && !isGone(err) {
				t.Fatal(err)
			}
			h.pass()
		case k < 77:
			op = "delete"
			if len(workloads) == 0 {
				continue
			}
			if err := h.DeleteWorkload(ctx, pick(workloads)); err != nil && !isGone(err) {
				t.Fatal(err)
			}
			h.pass()
		case k < 83:
			op = "inventory"
			ids := live()
			if len(ids) == 0 {
				continue
			}
			h.sync(pick(ids), &protocol.SyncRequest{Inventory: inventory()})
			h.pass()
		case k < 95:
			// Time passes; some machines keep in touch, the others go
			// silent, and the sweep fails what ran on those gone long.
			op = "time"
			h.clk.Advance(time.Duration(1+r.IntN(720)) * time.Second)
			check(step, "time passed")
			for _, id := range live() {
				if r.IntN(3) > 0 {
					h.sync(id, &protocol.SyncRequest{})
				}
			}
			h.pass()
		default:
			op = "revoke"
			ids := live()
			if len(ids) < 2 {
				continue
			}
			id := pick(ids)
			if err := h.RevokeMachine(ctx, id); err != nil {
				t.Fatal(err)
			}
			revoked = append(revoked, id)
			h.pass()
		}
		check(step, op)
	}
	// The fleet did what the test means it to: workloads held capacity,
	// and some were freed.
	var held, freed int
	for _, id := range workloads {
		w, err := h.Workload(ctx, id)
		switch {
		case isGone(err):
			freed++
		case err != nil:
			t.Fatal(err)
		case slices.Contains(holdingStates, w.State):
			held++
		case w.Machine != "":
			freed++
		}
	}
	if held == 0 || freed == 0 {
		t.Errorf("of %d workloads, %d hold capacity and %d were freed: the random fleet exercises too little", len(workloads), held, freed)
	}
}

// isGone: the workload went, or is going, as an earlier step asked.
func isGone(err error) bool {
	return errors.Is(err, store.ErrNotFound) || errors.Is(err, ErrInvalid)
}

// A new term reads capacity whole: while another hub led, it placed
// workloads this hub's view knows nothing of (no notifications between
// SQLite hubs), and trusting the view would over-commit the machine.
func TestNewTermReadsCapacityWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hub.db")
	clk := clock.NewFake(epoch)
	a := openTestHubAs(t, path, clk, "a")
	b := openTestHubAs(t, path, clk, "b")
	a.machine("m-1") // 8 CPUs
	create := func(h *testHub, name string) store.Workload {
		t.Helper()
		w, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: name, Kind: protocol.KindContainer, Class: "cpu-4", Region: "local", Image: "sim:"})
		if err != nil {
			t.Fatal(err)
		}
		h.pass()
		return w
	}
	wantState(t, a, create(a, "first").ID, store.StateProvisioning)
	// a's lease lapses; b leads and fills the machine.
	clk.Advance(a.cfg.LeaseTTL + time.Second)
	wantState(t, b, create(b, "second").ID, store.StateProvisioning)
	// b's lease lapses; a leads again, with a view of the first term.
	clk.Advance(b.cfg.LeaseTTL + time.Second)
	third := create(a, "third")
	if got := a.workload(third.ID); got.State != store.StateQueued {
		t.Fatalf("third cpu-4 workload on an 8-CPU machine holding two: %s on %s, want queued", got.State, got.Machine)
	}
}

// A change the view missed (here written behind the hub's back) is found
// by the full check, counted, and mended: the next check finds nothing.
func TestCapacityCheckMendsAMissedChange(t *testing.T) {
	h := newTestHub(t)
	ctx := context.Background()
	h.machine("m-1")
	h.machine("m-2")
	h.pass()
	if diffs, err := h.ctl.checkCapacity(ctx); err != nil || len(diffs) != 0 {
		t.Fatalf("first check: %v, %v", diffs, err)
	}
	err := h.st.Update(ctx, func(tx store.Tx) error {
		m, err := tx.Machine("m-2")
		if err != nil {
			return err
		}
		inv := *m.Inventory
		inv.CPUs = 2
		m.Inventory = &inv
		return tx.PutMachine(m)
	})
	if err != nil {
		t.Fatal(err)
	}
	diffs, err := h.ctl.checkCapacity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 || diffs[0].Machine != "m-2" {
		t.Fatalf("check after a missed change: %+v, want m-2 alone", diffs)
	}
	if got := h.Counters().CapacityViewMisses; got != 1 {
		t.Errorf("CapacityViewMisses %d, want 1", got)
	}
	if diffs, err := h.ctl.checkCapacity(ctx); err != nil || len(diffs) != 0 {
		t.Errorf("check after mending: %v, %v", diffs, err)
	}
}

// A machine revoked in the store before the view was told (the commit
// lands, its Changed call has yet to come) is not placed on: the admit
// transaction reads the chosen machine's record again and the batch
// places nothing; the next pass reads the machine afresh and queues.
func TestMachineChangedBeforeTheViewWasToldIsNotPlacedOn(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	ctx := context.Background()
	first, err := h.CreateWorkload(ctx, WorkloadSpec{Tenant: "local", Name: "first", Kind: protocol.KindContainer, Class: "cpu-1", Region: "local", Image: "sim:"})
	if err != nil {
		t.Fatal(err)
	}
	h.pass()
	wantState(t, h, first.ID, store.StateProvisioning) // the view holds m-1 now
	// Revoked behind the view's back.
	err = h.st.Update(ctx, func(tx store.Tx) error {
		m, err := tx.Machine("m-1")
		if err != nil {
			return err
		}
		m.Revoked = true
		return tx.PutMachine(m)
	})
	if err != nil {
		t.Fatal(err)
	}
	second, err := h.CreateWorkload(ctx, WorkloadSpec{Tenant: "local", Name: "second", Kind: protocol.KindContainer, Class: "cpu-1", Region: "local", Image: "sim:"})
	if err != nil {
		t.Fatal(err)
	}
	h.pass()
	if got := h.workload(second.ID); got.Machine == "m-1" {
		t.Fatalf("placed on machine m-1, revoked before the batch: %s", got.State)
	}
	h.pass()
	wantState(t, h, second.ID, store.StateQueued)
}

// The capacity view judges presence by the last syncs it keeps, which
// presence batches (here another replica's, written behind this hub's
// back) move without telling it. The sweep's read of the last syncs
// refreshes them, so a machine in touch with another replica is offered
// for placement long after the view last read it whole.
func TestSweepRefreshesTheViewsLastSyncs(t *testing.T) {
	h := newTestHub(t)
	ctx := context.Background()
	h.machine("m-1")
	h.pass() // reads the view whole, with m-1's first sync
	h.clk.Advance(30 * time.Second)
	if err := h.st.Update(ctx, func(tx store.Tx) error { return tx.TouchMachines([]string{"m-1"}, h.clk.Now()) }); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(10 * time.Second)
	h.pass() // sweeps
	// 50 s after the sync the view read, 20 s after the other replica's
	// batch; no sweep or full check is due in this pass.
	h.clk.Advance(10 * time.Second)
	w := h.create("web", protocol.KindContainer)
	if err := h.ctl.passFor(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := h.workload(w.ID); got.State != store.StateProvisioning || got.Machine != "m-1" {
		t.Fatalf("workload %s on %q (%s), want provisioning on m-1, online by the batch the sweep read", got.State, got.Machine, got.Reason)
	}
}

// TestSweepFindsMachinesTheViewWasNotToldOf: a machine that joined on
// another replica, over a store that carries no notifications between
// them, is offered by the leader's next sweep, not by its next full check
// minutes later; one removed there is dropped the same way.
func TestSweepFindsMachinesTheViewWasNotToldOf(t *testing.T) {
	h := newTestHub(t)
	ctx := context.Background()
	h.pass() // leads; reads the view whole: no machines
	other := openTestHubAs(t, h.path, h.clk, "other")
	other.machine("m-1")
	w := h.create("web", protocol.KindContainer)
	if err := h.ctl.passFor(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := h.workload(w.ID); got.State != store.StateQueued {
		t.Fatalf("workload %s on %q, want queued: the view was told of no machine", got.State, got.Machine)
	}
	h.clk.Advance(h.ctl.sweepEvery())
	h.pass() // sweeps
	h.pass() // admits what the sweep found
	if h.clk.Now().Sub(epoch) >= h.ctl.viewCheckEvery() {
		t.Fatal("a full check came due; the test no longer tells the sweep from it")
	}
	if got := h.workload(w.ID); got.State != store.StateProvisioning || got.Machine != "m-1" {
		t.Fatalf("workload %s on %q (%s), want provisioning on m-1, found by the sweep", got.State, got.Machine, got.Reason)
	}

	other.machine("m-2")
	h.clk.Advance(h.ctl.sweepEvery())
	h.pass() // sweeps: m-2 is marked changed
	check := func(what string) {
		t.Helper()
		diffs, err := h.ctl.checkCapacity(ctx) // reads what is marked first
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range diffs {
			t.Errorf("after a sweep the full check still finds machine %s %s: %s", d.Machine, d.What, what)
		}
	}
	check("m-2 joined on the other replica")
	if err := other.RemoveMachine(ctx, "m-2"); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(h.ctl.sweepEvery())
	h.pass()
	check("m-2 was removed on the other replica")
}

// TestOfferAsksForAPollsSignOfLifeOncePerSpan: a machine whose poll
// outlived its last sync by OfflineAfter is online by the poll's sign of
// life, a kernel call a connection; the view keeps the sign it found, so
// the admit batches after it do not ask again until that sign is itself
// OfflineAfter old (issue 13: a burst's batches asked for every such
// machine each time).
func TestOfferAsksForAPollsSignOfLifeOncePerSpan(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	h.pass()
	be := h.ctl.backend.(*agentBackend)
	asked := 0
	be.presence.held = func(id string, now time.Time) (time.Time, bool) {
		asked++
		return now.Add(-time.Second), true // a poll waits; its peer answered a second ago
	}
	placeOne := func(name string) {
		t.Helper()
		w := h.create(name, protocol.KindContainer)
		h.pass()
		if got := h.workload(w.ID); got.Machine != "m-1" {
			t.Fatalf("workload %s %s on %q (%s), want it placed on m-1, online by its poll", name, got.State, got.Machine, got.Reason)
		}
	}
	h.clk.Advance(DefaultOfflineAfter + 5*time.Second)
	placeOne("a")
	if asked != 1 {
		t.Fatalf("asked for the poll's sign of life %d times in one batch, want 1", asked)
	}
	h.clk.Advance(time.Second)
	placeOne("b")
	if asked != 1 {
		t.Fatalf("asked for the poll's sign of life %d times in all, want 1: the sign found 2 s ago stands", asked)
	}
	h.clk.Advance(DefaultOfflineAfter)
	placeOne("c")
	if asked != 2 {
		t.Fatalf("asked for the poll's sign of life %d times in all, want 2: the sign found was OfflineAfter old", asked)
	}
}

// TestCapacityCheckKeepsARightView: a full check that finds the view right
// keeps it, and the fleet made from it, taking only the fresher last
// syncs: built again, the fleet cost the next admit batch as much as the
// check (issue 13).
func TestCapacityCheckKeepsARightView(t *testing.T) {
	h := newTestHub(t)
	ctx := context.Background()
	h.machine("m-1")
	h.create("web", protocol.KindContainer)
	h.pass() // places web: the view and its fleet are built
	view := h.ctl.backend.(*agentBackend).view
	fleet := view.fleet
	if fleet == nil || view.listed == nil {
		t.Fatal("no fleet after an admit batch")
	}
	h.clk.Advance(time.Minute)
	if err := h.st.Update(ctx, func(tx store.Tx) error { return tx.TouchMachines([]string{"m-1"}, h.clk.Now()) }); err != nil {
		t.Fatal(err)
	}
	if diffs, err := h.ctl.checkCapacity(ctx); err != nil || len(diffs) != 0 {
		t.Fatalf("check: %v, %v", diffs, err)
	}
	if view.fleet != fleet {
		t.Error("a check that found the view right dropped its fleet")
	}
	if got := view.listed[view.machines["m-1"].slot].lastSync; !got.Equal(h.clk.Now()) {
		t.Errorf("after the check the view has m-1 last heard at %v, want the store's %v", got, h.clk.Now())
	}
}

// TestPresenceJudgedAsItFallsDueAgreesWithAFullJudge: the view judges
// again, per admit batch, only the machines judged offline and those whose
// sign of life has turned OfflineAfter old (issue 13: judging every
// machine cost each change time proportional to the fleet). On a random
// fleet whose machines join, sync, fall silent and keep polls waiting with
// signs of life of their own, what the fleet is told after every batch
// must be what judging each machine afresh says.
func TestPresenceJudgedAsItFallsDueAgreesWithAFullJudge(t *testing.T) {
	h := newTestHub(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 13))
	var ids []string
	for i := range 40 {
		id := fmt.Sprintf("m-%02d", i)
		h.machine(id)
		ids = append(ids, id)
	}
	h.pass()
	be := h.ctl.backend.(*agentBackend)
	signs := map[string]time.Time{} // the polls waiting, by their last sign of life
	be.presence.held = func(id string, now time.Time) (time.Time, bool) {
		at, ok := signs[id]
		return at, ok
	}
	batch := func() {
		t.Helper()
		be.Prepare()
		err := h.st.View(ctx, func(tx store.Tx) error {
			classes, err := classMap(tx)
			if err != nil {
				return err
			}
			_, err = be.Capacity(tx, classes)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	flips := map[bool]int{}
	for step := range 300 {
		h.clk.Advance(time.Duration(r.IntN(30_000)) * time.Millisecond)
		if step%25 == 0 {
			// A machine joins: the view lists its machines anew.
			id := fmt.Sprintf("m-%02d", len(ids))
			h.machine(id)
			ids = append(ids, id)
		}
		now := h.clk.Now()
		for _, id := range ids {
			switch r.IntN(10) {
			case 0:
				h.sync(id, &protocol.SyncRequest{})
			case 1:
				signs[id] = now.Add(-time.Duration(r.IntN(60)) * time.Second)
			case 2:
				delete(signs, id)
			}
		}
		if r.IntN(4) == 0 {
			// A pass's sweep brings the view fresher last syncs too.
			h.pass()
		}
		was := map[string]bool{}
		for id, vm := range be.view.machines {
			was[id] = vm.online
		}
		batch()
		for _, l := range be.view.listed {
			want := be.presence.recent(be.presence.heardLast(l.id, l.lastSync, now), now)
			if l.vm.online != want {
				t.Fatalf("step %d: machine %s told online=%t, judged afresh %t (last heard %s ago)", step, l.id, l.vm.online, want, now.Sub(l.lastSync))
			}
			if want != was[l.id] {
				flips[want]++
			}
		}
	}
	if flips[true] < 20 || flips[false] < 20 {
		t.Fatalf("machines came online %d times and went offline %d: the random fleet exercises too little", flips[true], flips[false])
	}
}
