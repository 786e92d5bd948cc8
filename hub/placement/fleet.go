package placement

import (
	"cmp"
	"slices"
	"strings"

	"einsora.dev/edge/protocol"
)

// Fleet is the machines placement chooses among, with what each has free,
// so a controller can place many workloads without summing every machine's
// Holding again for each. Its Place decides and records the placement, so
// the next Place sees what it took: each answer is exactly what the
// package's Place would answer given the fleet's machines with every
// earlier placement of the pass added to their Holding.
//
// A Fleet outlives a pass: NewPass drops the pass's holds, and Update,
// Remove and SetOnline patch one machine at a time, at a cost that does
// not grow with the fleet, so a controller keeps one Fleet and tells it
// what changed instead of building one per pass. A Fleet copies what it
// needs from the machines given and never changes them; a caller changes
// none of a machine's slices or maps (Holding apart) after giving it. It
// is not safe for concurrent use.
type Fleet struct {
	// drivers is the driver table in order of preference: strongest
	// isolation first, a strong driver before a weak one, then by name.
	drivers []Driver
	// machines are indexed by byID; an index stays its machine's until
	// the machine is removed (its slot is then gone, and reused by none).
	machines []machineState
	byID     map[string]int
	// byScope indexes machines by owner and region, the key of
	// Machine.CanHost, each list in ID order: the machines a workload may
	// use are among byScope[scope{w.Tenant, w.Region}], and CanHost
	// still decides.
	byScope map[scope][]int
	// placed maps a workload to the machine holding it.
	placed map[string]string
	// shortlists caches, per shape of workload, the machines that pass
	// the rules no Hold can change; Update and SetOnline keep them true.
	shortlists map[shape]*shortlist
	// pass numbers the pass under way (from 1); heldOn are the machines
	// it held on and heldWork the workloads it placed, dropped by
	// NewPass.
	pass     uint64
	heldOn   []int
	heldWork []string
	// gone counts the removed machines' slots.
	gone int
	// passedOver counts the machines Place set aside: what placing has
	// cost, in machines examined, which the tests hold to what changed.
	passedOver int
}

type scope struct{ owner, region string }

type machineState struct {
	m    Machine
	free Free
	// devices counts free devices of every accelerator.
	devices int
	// offers[i] is m.Offers(drivers[i]).
	offers []bool
	// lists are the shortlists the machine is on, with its place in each.
	lists []listing
	// limited[i] counts the holdings that count toward drivers[i]'s
	// per-machine limit.
	limited []int
	// held is set while the pass under way holds on the machine; gone
	// when the machine was removed.
	held, gone bool
}

// maxShortlists bounds the shapes a Fleet remembers: shapes come from
// workloads' classes, ports and needs, which callers choose. Past it, the
// cache is dropped whole and built again as workloads ask.
const maxShortlists = 512

// NewFleet returns the fleet of machines with the driver table drivers. A
// machine ID that repeats is taken once, first come; so is a driver name.
func NewFleet(machines []Machine, drivers []Driver) *Fleet {
	f := &Fleet{
		byID:    make(map[string]int, len(machines)),
		byScope: make(map[scope][]int),
		placed:  make(map[string]string, len(machines)),
		pass:    1,
	}
	seen := make(map[string]bool, len(drivers))
	for _, d := range drivers {
		if !seen[d.Name] {
			seen[d.Name] = true
			f.drivers = append(f.drivers, d)
		}
	}
	slices.SortStableFunc(f.drivers, preferDriver)

	f.machines = make([]machineState, 0, len(machines))
	// Every machine's offers and limits are cut from one block each, so
	// building a fleet allocates little per machine.
	nd := len(f.drivers)
	offers, limited := make([]bool, len(machines)*nd), make([]int, len(machines)*nd)
	for k, m := range machines {
		if _, dup := f.byID[m.ID]; dup {
			continue
		}
		f.byID[m.ID] = -1
		ms := machineState{offers: offers[k*nd : (k+1)*nd : (k+1)*nd], limited: limited[k*nd : (k+1)*nd : (k+1)*nd]}
		f.setRecord(&ms, m)
		f.machines = append(f.machines, ms)
	}
	slices.SortFunc(f.machines, func(a, b machineState) int { return cmp.Compare(a.m.ID, b.m.ID) })
	for i := range f.machines {
		m := &f.machines[i].m
		f.byID[m.ID] = i
		k := scope{m.Owner, m.Region}
		f.byScope[k] = append(f.byScope[k], i)
		for _, h := range m.Holding {
			f.placed[h.Workload] = m.ID
		}
	}
	return f
}

// setRecord makes ms the state of machine m with nothing held this pass,
// reusing ms's offers and limits when they fit.
func (f *Fleet) setRecord(ms *machineState, m Machine) {
	nd := len(f.drivers)
	if len(ms.offers) != nd {
		ms.offers, ms.limited = make([]bool, nd), make([]int, nd)
	}
	// The record outlives the call: what it holds is copied, as callers
	// edit holdings as workloads come and go.
	m.Holding = slices.Clone(m.Holding)
	ms.m, ms.free, ms.held = m, m.Free(), false
	ms.devices = ms.free.devices()
	for i, d := range f.drivers {
		ms.offers[i] = m.Offers(d)
		ms.limited[i] = m.HeldWith(d)
		if d.PerMachineLimit > 0 && slices.Contains(m.Withdrawn, d.Name) {
			ms.limited[i] = d.PerMachineLimit
		}
	}
}

// Machines returns how many machines the fleet holds.
func (f *Fleet) Machines() int { return len(f.byID) }

// NewPass ends the pass under way: what its Places held is dropped, as
// if they had never been made. A caller whose pass committed tells the
// fleet, by Update, of the machines whose Holding changed.
func (f *Fleet) NewPass() {
	for _, i := range f.heldOn {
		if ms := &f.machines[i]; ms.held && !ms.gone {
			f.setRecord(ms, ms.m)
			// Less held, it is a worse fit than its place says, and may
			// fit where the pass's holds had filled it.
			f.reconsider(i)
		}
	}
	for _, w := range f.heldWork {
		if on, ok := f.placed[w]; ok && !f.recordHolds(on, w) {
			delete(f.placed, w)
		}
	}
	f.heldOn, f.heldWork = f.heldOn[:0], f.heldWork[:0]
	f.pass++
	if f.gone > 64 && f.gone > len(f.byID) {
		f.compact()
	}
}

// recordHolds reports whether machine id's record lists workload w.
func (f *Fleet) recordHolds(id, w string) bool {
	i, ok := f.byID[id]
	return ok && slices.ContainsFunc(f.machines[i].m.Holding, func(h Held) bool { return h.Workload == w })
}

// compact drops the slots of removed machines, at the start of a pass.
func (f *Fleet) compact() {
	ms := make([]Machine, 0, len(f.byID))
	for i := range f.machines {
		if !f.machines[i].gone {
			ms = append(ms, f.machines[i].m)
		}
	}
	*f = *NewFleet(ms, f.drivers)
}

// Update sets machine m's record, replacing what the fleet had of it (the
// pass's holds on it included) or adding it.
func (f *Fleet) Update(m Machine) {
	i, ok := f.byID[m.ID]
	if ok && f.machines[i].m.Owner == m.Owner && f.machines[i].m.Region == m.Region {
		ms := &f.machines[i]
		f.removePlaced(ms.m)
		f.relist(i, func(ms *machineState) { f.setRecord(ms, m) })
		f.addPlaced(ms.m)
		return
	}
	if ok {
		// Out of everything the old record put it in.
		f.unlist(i)
		f.removePlaced(f.machines[i].m)
		f.removeFromScope(i)
	} else {
		f.machines = append(f.machines, machineState{})
		i = len(f.machines) - 1
		f.byID[m.ID] = i
	}
	ms := &f.machines[i]
	f.setRecord(ms, m)
	f.addToScope(i)
	f.addPlaced(ms.m)
	f.enlist(i)
}

// Remove drops machine id from the fleet, if it is there.
func (f *Fleet) Remove(id string) {
	i, ok := f.byID[id]
	if !ok {
		return
	}
	ms := &f.machines[i]
	f.unlist(i)
	f.removePlaced(ms.m)
	f.removeFromScope(i)
	delete(f.byID, id)
	*ms = machineState{m: Machine{ID: id}, gone: true}
	f.gone++
}

// SetOnline tells the fleet that machine id came online or went offline.
func (f *Fleet) SetOnline(id string, online bool) {
	i, ok := f.byID[id]
	if !ok || f.machines[i].m.Online == online {
		return
	}
	f.relist(i, func(ms *machineState) { ms.m.Online = online })
}

// relist applies change to machine i, which leaves it in its scope, and
// moves it on or off only the shortlists whose static rules it now passes
// or fails. A machine that stays on a list (a placement changed what it
// holds, the common case) keeps its place: taking it out of each sorted
// list and inserting it again cost the list's length, for every machine
// a burst placed on (issue 13).
func (f *Fleet) relist(i int, change func(ms *machineState)) {
	ms := &f.machines[i]
	k := scope{ms.m.Owner, ms.m.Region}
	var lists []*shortlist
	var was []stage
	for key, sl := range f.shortlists {
		if (scope{key.tenant, key.region}) != k {
			continue
		}
		s, _ := f.static(ms, &sl.w, &sl.c, sl.cands)
		lists, was = append(lists, sl), append(was, s)
	}
	change(ms)
	for j, sl := range lists {
		// The reason nothing fits may change with it.
		sl.known = false
		s, permitted := f.static(ms, &sl.w, &sl.c, sl.cands)
		on := ms.listed(sl)
		if on < 0 && was[j] != stageFits {
			sl.fails[was[j]]--
		}
		switch {
		case on >= 0 && s == stageFits:
			sl.set(f, i, on, permitted)
		case on >= 0:
			sl.remove(f, i, on)
			sl.fails[s]++
		case s == stageFits:
			sl.add(f, i, permitted)
		default:
			sl.fails[s]++
		}
	}
}

func (f *Fleet) addPlaced(m Machine) {
	for _, h := range m.Holding {
		f.placed[h.Workload] = m.ID
	}
}

func (f *Fleet) removePlaced(m Machine) {
	for _, h := range m.Holding {
		if f.placed[h.Workload] == m.ID {
			delete(f.placed, h.Workload)
		}
	}
}

// byIDOrder compares machine index i with ID id, for searches of lists
// kept in ID order.
func (f *Fleet) byIDOrder(i int, id string) int { return cmp.Compare(f.machines[i].m.ID, id) }

func (f *Fleet) addToScope(i int) {
	m := &f.machines[i].m
	k := scope{m.Owner, m.Region}
	l := f.byScope[k]
	at, _ := slices.BinarySearchFunc(l, m.ID, f.byIDOrder)
	f.byScope[k] = slices.Insert(l, at, i)
}

func (f *Fleet) removeFromScope(i int) {
	m := &f.machines[i].m
	k := scope{m.Owner, m.Region}
	l := f.byScope[k]
	if at, ok := slices.BinarySearchFunc(l, m.ID, f.byIDOrder); ok {
		l = slices.Delete(l, at, at+1)
	}
	if len(l) == 0 {
		delete(f.byScope, k)
	} else {
		f.byScope[k] = l
	}
}

// unlist takes machine i out of every shortlist of its scope, as the
// machine is now: it is on them, or counts toward the stage it fails at.
func (f *Fleet) unlist(i int) {
	ms := &f.machines[i]
	k := scope{ms.m.Owner, ms.m.Region}
	for len(ms.lists) > 0 {
		ms.lists[0].sl.remove(f, i, 0)
	}
	for key, sl := range f.shortlists {
		if (scope{key.tenant, key.region}) != k {
			continue
		}
		// The reason nothing fits may change with it.
		sl.known = false
		if s, _ := f.static(ms, &sl.w, &sl.c, sl.cands); s != stageFits {
			sl.fails[s]--
		}
	}
}

// enlist puts machine i on every shortlist of its scope that it passes,
// and counts it toward the stage it fails at on the others.
func (f *Fleet) enlist(i int) {
	ms := &f.machines[i]
	k := scope{ms.m.Owner, ms.m.Region}
	for key, sl := range f.shortlists {
		if (scope{key.tenant, key.region}) != k {
			continue
		}
		s, permitted := f.static(ms, &sl.w, &sl.c, sl.cands)
		if s != stageFits {
			sl.fails[s]++
			continue
		}
		sl.add(f, i, permitted)
	}
}

// preferDriver orders drivers by preference: strongest isolation first, a
// strong driver before a weak one, then by name.
func preferDriver(a, b Driver) int {
	if c := cmp.Compare(b.Isolation, a.Isolation); c != 0 {
		return c
	}
	if a.Weak != b.Weak {
		if b.Weak {
			return -1
		}
		return 1
	}
	return cmp.Compare(a.Name, b.Name)
}

// Place decides where w, of class c, runs, and holds what it takes for the
// rest of the pass; or it returns a *NoFit saying why w cannot run now. A
// caller that drops a decision (its store write failed) should drop the
// Fleet too, or the rest of the pass sees less capacity than there is.
func (f *Fleet) Place(w Workload, c Class) (Decision, error) {
	if !w.Kind.Valid() {
		return Decision{}, noFit("kind %q is not one einsora runs", w.Kind)
	}
	if !c.valid() {
		return Decision{}, noFit("class %s is not valid", c.Name)
	}
	if on, ok := f.placed[w.ID]; ok && w.ID != "" {
		return Decision{}, noFit("it is already placed on machine %s", on)
	}
	if w.Sticky() {
		return f.placeSticky(&w, &c)
	}
	sl := f.shortlist(&w, &c)
	sl.begin(f)
	if sl.noDriver {
		return Decision{}, noFit("no driver runs %s", workPhrase(w.Kind, &c))
	}
	// Best fit among the machines that may still fit, which the list
	// keeps as a heap by better across passes: the first that fits is
	// the best, so a placement costs the machines it passes over, not
	// the list (issue 13: a burst in a region of 10,000 scanned all
	// 10,000 for each, and making the heap again each pass cost as
	// much). One that fails a dynamic rule now fails it for the rest of
	// the pass (Holds only take capacity), so it is set aside until then.
	for len(sl.heap) > 0 {
		i := sl.heap[0]
		ms := &f.machines[i]
		if s, d := f.dynamic(ms, &w, &c, ms.lists[ms.listed(sl)].drivers); s == stageFits {
			return f.decide(i, d, &w, &c), nil
		}
		sl.setAside(f)
	}
	if !sl.known {
		// The furthest stage any machine reaches; dynamic stages all come
		// after static ones, and on a tie the first machine by ID names
		// the driver. Every machine of the list is set aside by now.
		sl.failStage, sl.failDriver = sl.stage(), -1
		first := ""
		for _, i := range sl.aside {
			ms := &f.machines[i]
			s, d := f.dynamic(ms, &w, &c, ms.lists[ms.listed(sl)].drivers)
			if s > sl.failStage || (s == sl.failStage && first != "" && ms.m.ID < first) {
				sl.failStage, sl.failDriver, first = s, d, ms.m.ID
			}
		}
		sl.known = true
	}
	return Decision{}, f.reason(sl.failStage, sl.failDriver, &w, &c)
}

func (f *Fleet) placeSticky(w *Workload, c *Class) (Decision, error) {
	cands := f.candidates(w, c)
	if w.HeldDriver != "" && len(cands) == 0 {
		for _, d := range f.drivers {
			if d.Name == w.HeldDriver {
				return Decision{}, noFit("driver %s, which holds its data, does not run %s", w.HeldDriver, workPhrase(w.Kind, c))
			}
		}
		return Decision{}, noFit("driver %s, which holds its data, is not in the hub's driver table", w.HeldDriver)
	}
	i, ok := f.byID[w.HeldMachine]
	if !ok {
		return Decision{}, noFit("waiting for machine %s, which holds its disk, to come online", w.HeldMachine)
	}
	ms := &f.machines[i]
	s, permitted := f.static(ms, w, c, cands)
	if s != stageFits {
		return Decision{}, f.reason(s, -1, w, c)
	}
	s, d := f.dynamic(ms, w, c, permitted)
	if s != stageFits {
		return Decision{}, f.reason(s, d, w, c)
	}
	return f.decide(i, d, w, c), nil
}

// candidates returns the drivers that run w's kind on c's accelerator, most
// preferred first; a sticky workload's only candidate is the driver holding
// its data, when it names one.
func (f *Fleet) candidates(w *Workload, c *Class) []int {
	var cands []int
	for i := range f.drivers {
		d := &f.drivers[i]
		if w.Sticky() && w.HeldDriver != "" && d.Name != w.HeldDriver {
			continue
		}
		if d.Runs(w.Kind, c.accelerator()) {
			cands = append(cands, i)
		}
	}
	return cands
}

// shape is what the static rules read of a workload and its class.
type shape struct {
	tenant, region string
	kind           protocol.Kind
	accelerator    string
	devices        int
	cpus, memoryMB int
	// limited says which drivers' limits the workload counts toward:
	// workloads alike but for that fail the limit differently.
	limited string
	// ports and needs: workloads alike but for their host ports or the
	// features they need fit different machines.
	ports, needs string
}

// shortlist holds, for one shape, the machines that pass the static rules.
type shortlist struct {
	// w and c are the shape's first workload and class, to check
	// machines against as they change; cands the drivers that run them.
	w        Workload
	c        Class
	cands    []int
	noDriver bool // no driver in the table runs the shape
	// fails counts the machines of the scope that fail each static stage.
	fails [stageFits]int
	// heap holds the machines on the list that may fit, as a heap by
	// Fleet.better; aside, those that failed a dynamic rule, back on the
	// heap only when what they have free may have grown: their record
	// changed, or a pass that held on them ended. A machine's place in
	// either is in its listing, kept true by every move.
	heap, aside []int
	// pass is the pass known is of.
	pass uint64
	// When known, failStage and failDriver are the reason nothing fits,
	// unchanged since no machine of the list has been held on since.
	known      bool
	failStage  stage
	failDriver int
}

// stage is the furthest static stage a machine of the scope failed at.
func (sl *shortlist) stage() stage {
	for s := stageFits - 1; s > stageHost; s-- {
		if sl.fails[s] > 0 {
			return s
		}
	}
	return stageHost
}

// listing is a machine's place on one shortlist.
type listing struct {
	sl *shortlist
	// at is the machine's index in sl.heap or, when negative, ^at is
	// its index in sl.aside.
	at int
	// drivers are the drivers it is permitted there, in preference
	// order.
	drivers []int
}

// listed returns the index in ms.lists of sl, or -1.
func (ms *machineState) listed(sl *shortlist) int {
	for j := range ms.lists {
		if ms.lists[j].sl == sl {
			return j
		}
	}
	return -1
}

// place is machine i's listing on sl, which it is on.
func (sl *shortlist) place(f *Fleet, i int) *listing {
	ms := &f.machines[i]
	return &ms.lists[ms.listed(sl)]
}

// begin readies the list for the fleet's pass. The machines set aside
// stay aside: each failed a dynamic rule for the list's shape, which reads
// only what the machine has free, and nothing it has free grew since, or
// it would be back on the heap (set, reconsider). Putting them all back at
// every pass made a placement pass over every full machine again: in a
// busy fleet, a change cost the fleet (issue 13).
func (sl *shortlist) begin(f *Fleet) {
	if sl.pass == f.pass {
		return
	}
	sl.pass, sl.known = f.pass, false
}

// add puts machine i, with its permitted drivers, on the list.
func (sl *shortlist) add(f *Fleet, i int, permitted []int) {
	ms := &f.machines[i]
	sl.known = false
	ms.lists = append(ms.lists, listing{sl: sl, drivers: permitted})
	sl.push(f, i, &ms.lists[len(ms.lists)-1])
}

// set changes the drivers machine i, whose listing on the list is
// ms.lists[on], is permitted there, after its record changed: it may fit
// again, and its place in the heap is made right.
func (sl *shortlist) set(f *Fleet, i, on int, permitted []int) {
	l := &f.machines[i].lists[on]
	sl.known = false
	l.drivers = permitted
	if l.at < 0 {
		sl.dropAside(f, ^l.at)
		sl.push(f, i, l)
		return
	}
	sl.fix(f, l.at)
}

// remove takes machine i, whose listing on the list is ms.lists[on], off
// the list.
func (sl *shortlist) remove(f *Fleet, i, on int) {
	ms := &f.machines[i]
	sl.known = false
	if at := ms.lists[on].at; at < 0 {
		sl.dropAside(f, ^at)
	} else {
		last := len(sl.heap) - 1
		sl.swap(f, at, last)
		sl.heap = sl.heap[:last]
		if at < last {
			sl.fix(f, at)
		}
	}
	ms.lists = slices.Delete(ms.lists, on, on+1)
}

// setAside moves the heap's first machine aside for the rest of the pass.
func (sl *shortlist) setAside(f *Fleet) {
	i := sl.heap[0]
	last := len(sl.heap) - 1
	sl.swap(f, 0, last)
	sl.heap = sl.heap[:last]
	if last > 0 {
		sl.down(f, 0)
	}
	sl.place(f, i).at = ^len(sl.aside)
	sl.aside = append(sl.aside, i)
	f.passedOver++
}

// dropAside takes the k-th machine set aside out of aside.
func (sl *shortlist) dropAside(f *Fleet, k int) {
	last := len(sl.aside) - 1
	if k < last {
		moved := sl.aside[last]
		sl.aside[k] = moved
		sl.place(f, moved).at = ^k
	}
	sl.aside = sl.aside[:last]
}

// push puts machine i, with listing l, on the heap.
func (sl *shortlist) push(f *Fleet, i int, l *listing) {
	l.at = len(sl.heap)
	sl.heap = append(sl.heap, i)
	sl.up(f, l.at)
}

// fix restores the heap after the machine at index at changed.
func (sl *shortlist) fix(f *Fleet, at int) {
	if !sl.down(f, at) {
		sl.up(f, at)
	}
}

func (sl *shortlist) up(f *Fleet, j int) {
	for j > 0 {
		parent := (j - 1) / 2
		if !f.better(sl.heap[j], sl.heap[parent]) {
			return
		}
		sl.swap(f, j, parent)
		j = parent
	}
}

// down sifts the machine at j down, reporting whether it moved.
func (sl *shortlist) down(f *Fleet, j int) bool {
	start, n := j, len(sl.heap)
	for {
		child := 2*j + 1
		if child >= n {
			break
		}
		if r := child + 1; r < n && f.better(sl.heap[r], sl.heap[child]) {
			child = r
		}
		if !f.better(sl.heap[child], sl.heap[j]) {
			break
		}
		sl.swap(f, j, child)
		j = child
	}
	return j > start
}

func (sl *shortlist) swap(f *Fleet, a, b int) {
	sl.heap[a], sl.heap[b] = sl.heap[b], sl.heap[a]
	sl.place(f, sl.heap[a]).at = a
	sl.place(f, sl.heap[b]).at = b
}

// shortlist returns the machines that pass the static rules for w and c:
// those no Hold can change (CanHost, Equipped, a driver that runs it, is
// offered and is permitted, online). It is made once per shape, then kept true.
// limitedBy marks, per limited driver, whether w counts toward its limit.
func (f *Fleet) limitedBy(w *Workload) string {
	var b []byte
	for _, d := range f.drivers {
		if d.PerMachineLimit > 0 && d.Limited != nil {
			if d.Counts(w.Image) {
				b = append(b, '1')
			} else {
				b = append(b, '0')
			}
		}
	}
	return string(b)
}

func (f *Fleet) shortlist(w *Workload, c *Class) *shortlist {
	k := shape{w.Tenant, w.Region, w.Kind, c.accelerator(), c.Devices, c.CPUs, c.MemoryMB, f.limitedBy(w),
		portsString(w.Ports), strings.Join(w.Needs, ",")}
	if sl, ok := f.shortlists[k]; ok {
		return sl
	}
	if len(f.shortlists) >= maxShortlists {
		for i := range f.machines {
			f.machines[i].lists = nil
		}
		clear(f.shortlists)
	}
	sl := &shortlist{w: *w, c: *c}
	sl.w.ID, sl.w.Image, sl.w.Ports, sl.w.Needs = "", "", nil, slices.Clone(w.Needs)
	sl.cands = f.candidates(w, c)
	if len(sl.cands) == 0 {
		sl.noDriver = true
	}
	for _, i := range f.byScope[scope{w.Tenant, w.Region}] {
		ms := &f.machines[i]
		s, permitted := f.static(ms, w, c, sl.cands)
		if s != stageFits {
			sl.fails[s]++
			continue
		}
		sl.add(f, i, permitted)
	}
	if f.shortlists == nil {
		f.shortlists = make(map[shape]*shortlist)
	}
	f.shortlists[k] = sl
	return sl
}

// static checks the rules that no Hold changes, in order, for w on one
// machine with cands the drivers that run it: CanHost, Equipped, a driver
// offered, one permitted, online. It returns the stage failed, or stageFits
// and the permitted drivers in order of preference.
func (f *Fleet) static(ms *machineState, w *Workload, c *Class, cands []int) (stage, []int) {
	m := &ms.m
	if !m.CanHost(*w) {
		return stageHost, nil
	}
	if s := m.equip(c); s != stageFits {
		return s, nil
	}
	offered := false
	var permitted []int
	for _, i := range cands {
		if !ms.offers[i] || !f.drivers[i].RunsOn(m.Engine, w.Kind) {
			continue
		}
		offered = true
		if m.Permits(*w, f.drivers[i]) {
			permitted = append(permitted, i)
		}
	}
	switch {
	case !offered:
		return stageDriver, nil
	case len(permitted) == 0:
		return stagePermit, nil
	case !m.HasFeatures(w.Needs):
		return stageFeature, nil
	case !m.Online:
		return stageOnline, nil
	}
	return stageFits, permitted
}

// dynamic checks the rules a Hold changes: the first of the permitted
// drivers under its per-machine limit, then free devices, CPUs and memory.
// It returns the stage failed, or stageFits, and the driver chosen (or, at
// stageLimit, the driver at its limit).
func (f *Fleet) dynamic(ms *machineState, w *Workload, c *Class, permitted []int) (stage, int) {
	chosen := -1
	for _, i := range permitted {
		d := &f.drivers[i]
		if d.PerMachineLimit <= 0 || !d.Counts(w.Image) || d.Allows(ms.limited[i]) {
			chosen = i
			break
		}
	}
	if chosen < 0 {
		return stageLimit, permitted[0]
	}
	if s := ms.free.lack(c); s != stageFits {
		return s, chosen
	}
	if ms.free.takenPort(w.Ports) != nil {
		return stagePortsFree, chosen
	}
	return stageFits, chosen
}

// portsString keys a shape by its host ports.
func portsString(ports []protocol.Port) string {
	keys := make([]string, len(ports))
	for i, p := range ports {
		keys[i] = portKey(p)
	}
	return strings.Join(keys, ",")
}

// better reports whether machine i is a better fit than machine j for the
// workload at hand: after placement it has fewer free devices, then fewer
// free CPUs, then less free memory, then the lower ID. The workload takes the
// same from either, so comparing what is free now is enough.
func (f *Fleet) better(i, j int) bool {
	a, b := &f.machines[i], &f.machines[j]
	if a.devices != b.devices {
		return a.devices < b.devices
	}
	if a.free.CPUs != b.free.CPUs {
		return a.free.CPUs < b.free.CPUs
	}
	if a.free.MemoryMB != b.free.MemoryMB {
		return a.free.MemoryMB < b.free.MemoryMB
	}
	return a.m.ID < b.m.ID
}

// decide makes the decision for w on machine i with the given driver, taking
// the lowest-sorted free devices, and holds it.
func (f *Fleet) decide(i, driver int, w *Workload, c *Class) Decision {
	ms := &f.machines[i]
	d := &f.drivers[driver]
	dec := Decision{Machine: ms.m.ID, Driver: d.Name, Isolation: d.Isolation}
	if c.Devices > 0 {
		dec.Devices = slices.Clone(ms.free.Devices[c.accelerator()][:c.Devices])
	}
	f.hold(i, w, c, dec)
	return dec
}

// hold records that w, of class c, is placed on machine i as dec says, so
// later Places see its CPUs, memory, devices and driver taken.
func (f *Fleet) hold(i int, w *Workload, c *Class, dec Decision) {
	ms := &f.machines[i]
	ms.free.CPUs -= c.CPUs
	ms.free.MemoryMB -= c.MemoryMB
	if len(dec.Devices) > 0 {
		acc := c.accelerator()
		left := slices.DeleteFunc(slices.Clone(ms.free.Devices[acc]), func(id string) bool { return slices.Contains(dec.Devices, id) })
		if len(left) == 0 {
			delete(ms.free.Devices, acc)
		} else {
			ms.free.Devices[acc] = left
		}
		ms.devices -= len(dec.Devices)
	}
	if ms.free.Drivers == nil {
		ms.free.Drivers = make(map[string]int)
	}
	ms.free.Drivers[dec.Driver]++
	ms.free.takePorts(w.Ports)
	for i, d := range f.drivers {
		if d.Name == dec.Driver && d.Counts(w.Image) {
			ms.limited[i]++
		}
	}
	if w.ID != "" {
		f.placed[w.ID] = dec.Machine
		f.heldWork = append(f.heldWork, w.ID)
	}
	if !ms.held {
		ms.held = true
		f.heldOn = append(f.heldOn, i)
	}
	// Now a better fit than its places say.
	f.refit(i)
}

// refit makes machine i's places on its lists' heaps right after a hold
// took some of what it has free; the reason nothing fits may change with
// it. A list it is set aside on keeps it there: with less free, it still
// fails the rule it failed.
func (f *Fleet) refit(i int) {
	for _, l := range f.machines[i].lists {
		l.sl.known = false
		if l.at >= 0 {
			l.sl.fix(f, l.at)
		}
	}
}

// reconsider makes machine i's places right after what it has free grew:
// on the lists it was set aside on it may fit again, so it is back on
// their heaps.
func (f *Fleet) reconsider(i int) {
	ms := &f.machines[i]
	for j := range ms.lists {
		l := &ms.lists[j]
		l.sl.known = false
		if l.at < 0 {
			l.sl.dropAside(f, ^l.at)
			l.sl.push(f, i, l)
			continue
		}
		l.sl.fix(f, l.at)
	}
}
