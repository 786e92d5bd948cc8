package hub

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/placement"
	"einsora.dev/edge/hub/store"
)

// capView is the leading controller's capacity view (issue 13): the
// region's machines as placement needs them, with the workloads that hold
// capacity on each. Reading the whole fleet in every admit batch made each
// change cost time proportional to the fleet; the view is read whole only
// when a term starts (or when it cannot be trusted), then each admit batch
// re-reads, in its own transaction, just the machines that changed since.
// Nothing is known only here (rule 1): the view is a cache of the store,
// and a periodic full read (check) must agree with it.
//
// Presence is judged at use time from the cached last sync and the polls
// held here; the sweep refreshes the last syncs (heard), which the
// presence batches move without telling anyone.
type capView struct {
	region string

	// mu guards changed and lost.
	mu sync.Mutex
	// changed holds the machines whose record, or what is placed on
	// them, changed since the view last read them. Bounded: past
	// maxChanged, lost is set instead and the view is read whole.
	changed map[string]bool
	// lost: the view cannot be trusted (a new term, missed
	// notifications, too many changes to list); read it whole.
	lost bool

	// The pass goroutine alone touches the following fields.
	// pending and pendingLost are what prepare took, for the next
	// transaction to read again; kept until one has.
	pending     map[string]bool
	pendingLost bool
	// machines are the region's machines by ID; nil before the first
	// full read. listed holds what presence reads of each, in one block,
	// indexed by slot for due and offline below; nil when a machine came
	// or went since.
	machines map[string]*viewMachine
	listed   []listedMachine
	// due holds every listed machine judged online, by the last sign of
	// life it was judged on; offline, the slots of those judged offline.
	// None can go offline before the first of due is OfflineAfter old,
	// so a batch judges again the machines due and the offline ones, not
	// the region: judging every machine cost each change time
	// proportional to the fleet (issue 13). Both are made with listed.
	due            dueHeap
	offline, spare []int
	// fleet is placement's form of the machines, kept across admit
	// batches and told what changed (placement.Fleet.Update), so a batch
	// costs what changed, not the region; nil when the view was read
	// whole since (it is built again). refreshed are the machines read
	// again, or dropped, since the fleet was last told.
	fleet     *placement.Fleet
	refreshed map[string]bool
	drivers   []placement.Driver
	// classes are the classes the fleet's machines were made with; an
	// edited class builds it again.
	classes map[string]store.Class
	// diffs counts the machines a full check found the view wrong about.
	diffs atomic.Int64
}

// viewMachine is one machine of the view.
type viewMachine struct {
	m store.Machine
	// holding are the workloads that hold capacity on it (provisioning,
	// running, stopping), oldest first.
	holding []store.Workload
	// online is what the fleet was last told of its presence; slot is
	// its place in the view's listed.
	online bool
	slot   int
}

// listedMachine is what presence reads of a machine of the view.
type listedMachine struct {
	id string
	// lastSync is when it was last heard from: its last sync as the view
	// read it, or a later sign of life of its poll (presence.heardLast).
	lastSync time.Time
	vm       *viewMachine
}

// maxChanged bounds the machines a view lists as changed before it gives
// up listing and reads the store whole: the IDs come from notifications.
const maxChanged = 100_000

// holdingStates are the states in which a placed workload holds
// capacity on its machine.
var holdingStates = []store.State{store.StateProvisioning, store.StateRunning, store.StateStopping}

func newCapView(region string, drivers []placement.Driver) *capView {
	return &capView{region: region, drivers: drivers, changed: make(map[string]bool), refreshed: make(map[string]bool), lost: true}
}

// touch marks machines as changed: the next use re-reads them. Call it
// after the commit that changed them; safe from any goroutine.
func (v *capView) touch(ids ...string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.lost {
		return
	}
	for _, id := range ids {
		if id == "" {
			continue
		}
		if len(v.changed) >= maxChanged {
			v.lost = true
			clear(v.changed)
			return
		}
		v.changed[id] = true
	}
}

// placed takes workloads admission placed, as committed, into the holdings
// of their machines, and tells the fleet: reading each machine again cost
// an admit batch two queries for every workload the one before it placed
// (issue 13). A machine the view does not know yet is left to the read
// that will find it (it was marked changed when it came); one to be read
// again anyway takes the placement now and is replaced then. Only the
// pass goroutine calls it.
func (v *capView) placed(ws []store.Workload) {
	for _, w := range ws {
		vm := v.machines[w.Machine]
		if vm == nil {
			continue
		}
		// In the store's order (created, then ID), in place of an older
		// copy of it.
		vm.holding = slices.DeleteFunc(vm.holding, func(h store.Workload) bool { return h.ID == w.ID })
		at, _ := slices.BinarySearchFunc(vm.holding, w, func(a, b store.Workload) int {
			return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
		})
		vm.holding = slices.Insert(vm.holding, at, w)
		v.refreshed[w.Machine] = true
	}
}

// forget makes the next use read the store whole.
func (v *capView) forget() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lost = true
	clear(v.changed)
}

// behind reports whether the view has more to read than what changed in
// a batch: it was never read, is lost, or has changes waiting; or its
// fleet is to be built. Only the pass goroutine calls it.
func (v *capView) behind() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.machines == nil || v.fleet == nil || v.lost || len(v.changed) > 0 || v.pendingLost || len(v.pending) > 0
}

// prepare takes what changed, for the next transaction to read again.
// It is called before that transaction begins, so the transaction sees
// every commit whose change it took (a change is told after its commit),
// whatever the store's isolation.
func (v *capView) prepare() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pendingLost = v.pendingLost || v.lost || len(v.pending)+len(v.changed) > maxChanged
	v.lost = false
	if v.pending == nil {
		v.pending = make(map[string]bool)
	}
	if v.pendingLost {
		clear(v.pending)
	} else {
		maps.Copy(v.pending, v.changed)
	}
	clear(v.changed)
}

// update brings the view up to date in tx with what prepare took: the
// changed machines read again, or the whole region read when the view
// was lost (or never read). What it could not read stays pending.
func (v *capView) update(tx store.Tx) error {
	// Past a quarter of the region, one read of it is cheaper than a read
	// per machine (a fleet connecting at once).
	if v.pendingLost || v.machines == nil || len(v.pending) > max(64, len(v.machines)/4) {
		ms, err := v.readAll(tx)
		if err != nil {
			return err
		}
		v.machines, v.listed, v.fleet, v.pendingLost = ms, nil, nil, false
		clear(v.pending)
		return nil
	}
	for id := range v.pending {
		if err := v.reread(tx, id); err != nil {
			return err
		}
		delete(v.pending, id)
	}
	return nil
}

// errViewStale: a machine's record changed in the store before the view
// was told; the admit batch that found it commits nothing and is made
// again, with the machine read afresh.
var errViewStale = errors.New("the capacity view is behind the store")

// sameRecord reports whether m, read from the store, matches the view's
// record of it on everything placement reads (not the last sync, which
// presence batches move).
func (v *capView) sameRecord(m store.Machine) bool {
	vm := v.machines[m.ID]
	if vm == nil {
		return false
	}
	a := vm.m
	return a.Owner == m.Owner && a.Region == m.Region && a.OS == m.OS && a.Arch == m.Arch &&
		a.Revoked == m.Revoked && reflect.DeepEqual(a.Inventory, m.Inventory)
}

// reread reads one machine and what holds capacity on it.
func (v *capView) reread(tx store.Tx, id string) error {
	m, err := tx.Machine(id)
	if errors.Is(err, store.ErrNotFound) {
		v.drop(id)
		return nil
	}
	if err != nil {
		return fmt.Errorf("read machine %s: %w", id, err)
	}
	if m.Region != v.region {
		v.drop(id)
		return nil
	}
	ws, err := tx.Workloads(store.WorkloadFilter{Machine: id, States: holdingStates})
	if err != nil {
		return fmt.Errorf("read the workloads of machine %s: %w", id, err)
	}
	v.refreshed[id] = true
	if vm := v.machines[id]; vm != nil {
		// In place: listed keeps pointing at it.
		*vm = viewMachine{m: m, holding: ws, online: vm.online, slot: vm.slot}
		if v.listed != nil {
			v.listed[vm.slot].lastSync = clock.Later(v.listed[vm.slot].lastSync, m.LastSync)
		}
		return nil
	}
	v.machines[id] = &viewMachine{m: m, holding: ws}
	v.listed = nil
	return nil
}

// heard takes the last syncs the sweep read: those newer than the view's
// (an admit batch may have read a machine since the sweep did). A machine
// the list and the view disagree on, one registered or gone by a change
// whose notification never came (a replica's over a store that carries
// none, or one lost), is marked changed for the next batch to read: the
// sweep finds within sweepEvery what the full check would find minutes
// later. It returns how many it marked.
func (v *capView) heard(ls []store.LastSync) int {
	if v.machines == nil {
		return 0
	}
	var unknown []string
	known := 0
	for _, l := range ls {
		vm := v.machines[l.Machine]
		if vm == nil {
			unknown = append(unknown, l.Machine)
			continue
		}
		known++
		v.takeLastSync(vm, l.At)
	}
	if known < len(v.machines) {
		// Rare: a machine the list lacks. Find which.
		inList := make(map[string]bool, len(ls))
		for _, l := range ls {
			inList[l.Machine] = true
		}
		for id := range v.machines {
			if !inList[id] {
				unknown = append(unknown, id)
			}
		}
	}
	v.touch(unknown...)
	return len(unknown)
}

// observed takes the last syncs of machines just observed; a machine the
// view does not know is left to the read that will find it.
func (v *capView) observed(ls []store.LastSync) {
	for _, l := range ls {
		if vm := v.machines[l.Machine]; vm != nil {
			v.takeLastSync(vm, l.At)
		}
	}
}

// holds reports whether w holds capacity on its machine.
func holds(w store.Workload) bool { return w.Machine != "" && slices.Contains(holdingStates, w.State) }

// takeLastSync takes vm's last sync as read from the store, when newer
// than the view's.
func (v *capView) takeLastSync(vm *viewMachine, at time.Time) {
	if !at.After(vm.m.LastSync) {
		return
	}
	vm.m.LastSync = at
	if v.listed != nil {
		v.listed[vm.slot].lastSync = clock.Later(v.listed[vm.slot].lastSync, at)
	}
}

func (v *capView) drop(id string) {
	if _, ok := v.machines[id]; ok {
		delete(v.machines, id)
		v.listed = nil
		v.refreshed[id] = true
	}
}

// readAll reads the region's machines and what holds capacity on them:
// the full pass the view replaces per change.
func (v *capView) readAll(tx store.Tx) (map[string]*viewMachine, error) {
	ms, err := tx.Machines()
	if err != nil {
		return nil, fmt.Errorf("read the machines: %w", err)
	}
	out := make(map[string]*viewMachine, len(ms))
	for _, m := range ms {
		if m.Region == v.region {
			out[m.ID] = &viewMachine{m: m}
		}
	}
	ws, err := tx.Workloads(store.WorkloadFilter{States: holdingStates})
	if err != nil {
		return nil, fmt.Errorf("read the placed workloads: %w", err)
	}
	for _, w := range ws {
		if vm := out[w.Machine]; vm != nil {
			vm.holding = append(vm.holding, w)
		}
	}
	return out, nil
}

// offer is placement's view of the machines, for one admit batch: those
// with a validated inventory and not revoked, online as presence judges
// them now, with nothing held by earlier batches but what the store says.
// The fleet is kept from batch to batch and told only of the machines
// read again since and of those whose presence changed; it is built
// whole after a full read or an edited class.
func (v *capView) offer(p presence, classes map[string]store.Class) *placement.Fleet {
	if !maps.Equal(v.classes, classes) {
		v.classes = maps.Clone(classes)
		v.fleet = nil
	}
	relisted := v.listed == nil
	if relisted {
		v.listed = make([]listedMachine, 0, len(v.machines))
		for id, vm := range v.machines {
			vm.slot = len(v.listed)
			v.listed = append(v.listed, listedMachine{id: id, lastSync: vm.m.LastSync, vm: vm})
		}
	}
	now := p.clk.Now()
	if v.fleet == nil {
		v.judgeAll(p, now, nil)
		pms := make([]placement.Machine, 0, len(v.machines))
		for i := range v.listed {
			vm := v.listed[i].vm
			if pm, ok := placementMachine(vm, classes); ok {
				pm.Online = vm.online
				pms = append(pms, pm)
			}
		}
		v.fleet = placement.NewFleet(pms, v.drivers)
		clear(v.refreshed)
		return v.fleet
	}
	// What earlier batches held is in the store now, or was never
	// committed; the machines it was committed on were read again.
	v.fleet.NewPass()
	for id := range v.refreshed {
		if vm := v.machines[id]; vm != nil {
			if pm, ok := placementMachine(vm, classes); ok {
				// As last judged: the region is judged below.
				pm.Online = vm.online
				v.fleet.Update(pm)
				continue
			}
		}
		v.fleet.Remove(id)
	}
	clear(v.refreshed)
	tell := func(l *listedMachine) { v.fleet.SetOnline(l.id, l.vm.online) }
	if relisted {
		v.judgeAll(p, now, tell)
	} else {
		v.judgeDue(p, now, tell)
	}
	return v.fleet
}

// judgeAll judges every listed machine at now, calling tell (if not nil)
// for each whose presence changed, and makes due and offline anew.
func (v *capView) judgeAll(p presence, now time.Time, tell func(*listedMachine)) {
	v.due, v.offline = v.due[:0], v.offline[:0]
	for slot := range v.listed {
		v.rejudge(p, slot, now, tell)
	}
}

// judgeDue judges at now the machines judged offline and those of due
// whose sign of life is no longer recent, as judgeAll would have.
func (v *capView) judgeDue(p presence, now time.Time, tell func(*listedMachine)) {
	was := v.offline
	v.offline = v.spare[:0]
	for _, slot := range was {
		v.rejudge(p, slot, now, tell)
	}
	v.spare = was[:0]
	for len(v.due) > 0 && !p.recent(v.due[0].at, now) {
		v.rejudge(p, heap.Pop(&v.due).(dueEntry).slot, now, tell)
	}
}

// rejudge judges the machine listed at slot, which is in neither due nor
// offline, and puts it in the one it now belongs to.
func (v *capView) rejudge(p presence, slot int, now time.Time, tell func(*listedMachine)) {
	l := &v.listed[slot]
	on := v.judge(p, l, now)
	if on != l.vm.online {
		l.vm.online = on
		if tell != nil {
			tell(l)
		}
	}
	if on {
		heap.Push(&v.due, dueEntry{at: l.lastSync, slot: slot})
	} else {
		v.offline = append(v.offline, slot)
	}
}

// dueEntry is a machine of the view judged online on a sign of life at
// at: it stays online until at is OfflineAfter old.
type dueEntry struct {
	at   time.Time
	slot int
}

// dueHeap is a heap of dueEntry, the oldest sign of life first.
type dueHeap []dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(a, b int) bool { return h[a].at.Before(h[b].at) }
func (h dueHeap) Swap(a, b int)      { h[a], h[b] = h[b], h[a] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// judge reports whether l is online at now. A poll's sign of life it finds
// stands in for a sync until the store's comes: otherwise each batch of a
// burst asked the kernel again for every machine whose poll outlived its
// last sync by OfflineAfter (issue 13).
func (v *capView) judge(p presence, l *listedMachine, now time.Time) bool {
	l.lastSync = p.heardLast(l.id, l.lastSync, now)
	return p.recent(l.lastSync, now)
}

// placementMachine is vm as placement sees it, but for Online; ok is
// false for a machine placement never sees.
func placementMachine(vm *viewMachine, classes map[string]store.Class) (placement.Machine, bool) {
	m := vm.m
	if m.Inventory == nil || m.Revoked {
		return placement.Machine{}, false
	}
	var held []placement.Held
	for _, w := range vm.holding {
		class := classes[w.Class]
		held = append(held, placement.Held{
			Workload: w.ID, Driver: w.Driver, Kind: w.Kind, Image: w.Image, CPUs: class.CPUs, MemoryMB: class.MemoryMB, Devices: w.Devices,
			Ports: w.Spec.Ports,
		})
	}
	return placement.Machine{
		ID: m.ID, Owner: m.Owner, Region: m.Region, OS: m.OS, Arch: m.Arch,
		CPUs: m.Inventory.CPUs, MemoryMB: m.Inventory.MemoryMB,
		Devices:   placement.DevicesFromInventory(*m.Inventory),
		Engine:    placement.EngineOf(*m.Inventory),
		Drivers:   m.Inventory.Drivers,
		Withdrawn: m.Inventory.Withdrawn,
		Features:  m.Inventory.Features,
		Holding:   held,
	}, true
}

// viewDiff is one machine the view had wrong.
type viewDiff struct {
	Machine string
	// What says what differed, in words.
	What string
}

// check reads the region whole in tx, after bringing the view up to date
// with what prepare took, and compares the two as
// placement would see them. Where they differ it adopts the full read;
// where not it keeps the view. It returns the machines the view had wrong.
func (v *capView) check(tx store.Tx, classes map[string]store.Class) ([]viewDiff, error) {
	if err := v.update(tx); err != nil {
		return nil, err
	}
	full, err := v.readAll(tx)
	if err != nil {
		return nil, err
	}
	diffs := compareViews(v.machines, full, classes)
	// A machine told changed since prepare may have committed between
	// prepare and this read: the view has yet to read it, which is no
	// miss. (Its next use reads it again.)
	v.mu.Lock()
	diffs = slices.DeleteFunc(diffs, func(d viewDiff) bool { return v.changed[d.Machine] })
	v.mu.Unlock()
	v.diffs.Add(int64(len(diffs)))
	if len(diffs) > 0 {
		v.machines, v.listed, v.fleet = full, nil, nil
		return diffs, nil
	}
	// The view was right: keep it, and the fleet made from it, which
	// built again cost the next admit batch as much as the check (issue
	// 13: a change just after a check waited for both). Only the last
	// syncs, which the full read has fresher, are taken.
	for id, f := range full {
		if vm := v.machines[id]; vm != nil {
			v.takeLastSync(vm, f.m.LastSync)
		}
	}
	return nil, nil
}

// compareViews lists the machines where inc differs from full, by what
// placement reads of them: presence (the last sync, which presence
// batches move silently) is left out.
func compareViews(inc, full map[string]*viewMachine, classes map[string]store.Class) []viewDiff {
	var diffs []viewDiff
	for id, f := range full {
		i, ok := inc[id]
		if !ok {
			diffs = append(diffs, viewDiff{id, "missing from the view"})
			continue
		}
		if what := diffMachine(i, f, classes); what != "" {
			diffs = append(diffs, viewDiff{id, what})
		}
	}
	for id := range inc {
		if _, ok := full[id]; !ok {
			diffs = append(diffs, viewDiff{id, "in the view but not in the store's region"})
		}
	}
	slices.SortFunc(diffs, func(a, b viewDiff) int { return cmp.Compare(a.Machine, b.Machine) })
	return diffs
}

func diffMachine(inc, full *viewMachine, classes map[string]store.Class) string {
	a, aok := placementMachine(inc, classes)
	b, bok := placementMachine(full, classes)
	switch {
	case aok != bok:
		return fmt.Sprintf("offered to placement: view %t, store %t", aok, bok)
	case !aok:
		return ""
	}
	byID := func(x, y placement.Held) int { return cmp.Compare(x.Workload, y.Workload) }
	slices.SortFunc(a.Holding, byID)
	slices.SortFunc(b.Holding, byID)
	if !reflect.DeepEqual(a.Holding, b.Holding) {
		return fmt.Sprintf("holding: view %v, store %v", heldIDs(a.Holding), heldIDs(b.Holding))
	}
	a.Holding, b.Holding = nil, nil
	if !reflect.DeepEqual(a, b) {
		return fmt.Sprintf("record: view %+v, store %+v", a, b)
	}
	return ""
}

func heldIDs(hs []placement.Held) []string {
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = h.Workload
	}
	return ids
}
