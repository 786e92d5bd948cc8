package placement

import (
	"cmp"
	"slices"
	"strings"

	"einsora.dev/edge/protocol"
)

// Fleet is the machines of one admit pass with what each has free, so a
// controller can place many workloads without summing every machine's
// Holding again for each. Its Place decides and records the placement, so
// the next Place sees what it took: each answer is exactly what the package's
// Place would answer given the machines with every earlier placement of the
// pass added to their Holding. A Fleet copies what it needs from the machines
// given and never changes them. It is not safe for concurrent use.
type Fleet struct {
	// drivers is the driver table in order of preference: strongest
	// isolation first, a strong driver before a weak one, then by name.
	drivers  []Driver
	machines []machineState // sorted by ID
	byID     map[string]int
	// byScope indexes machines by owner and region, the key of
	// Machine.CanHost: the machines a workload may use are among
	// byScope[scope{w.Tenant, w.Region}], and CanHost still decides.
	byScope map[scope][]int
	// placed maps a workload to the machine holding it.
	placed map[string]string
	// shortlists caches, per shape of workload, the machines that pass
	// the rules no Hold can change.
	shortlists map[shape]*shortlist
}

type scope struct{ owner, region string }

type machineState struct {
	m    Machine
	free Free
	// devices counts free devices of every accelerator.
	devices int
	// offers[i] is m.Offers(drivers[i]).
	offers []bool
	// lists are the shortlists the machine is on.
	lists []*shortlist
	// limited[i] counts the holdings that count toward drivers[i]'s
	// per-machine limit.
	limited []int
}

// NewFleet returns the fleet of machines with the driver table drivers. A
// machine ID that repeats is taken once, first come; so is a driver name.
func NewFleet(machines []Machine, drivers []Driver) *Fleet {
	f := &Fleet{
		byID:    make(map[string]int, len(machines)),
		byScope: make(map[scope][]int),
		placed:  make(map[string]string, len(machines)),
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
	// Every machine's offers and limits are cut from one block each: a
	// fleet is built per admit batch, so per-machine allocations add up.
	nd := len(f.drivers)
	offers, limited := make([]bool, len(machines)*nd), make([]int, len(machines)*nd)
	for k, m := range machines {
		if _, dup := f.byID[m.ID]; dup {
			continue
		}
		f.byID[m.ID] = -1
		ms := machineState{m: m, free: m.Free(), offers: offers[k*nd : (k+1)*nd : (k+1)*nd], limited: limited[k*nd : (k+1)*nd : (k+1)*nd]}
		ms.devices = ms.free.devices()
		for i, d := range f.drivers {
			ms.offers[i] = m.Offers(d)
			ms.limited[i] = m.HeldWith(d)
			if d.PerMachineLimit > 0 && slices.Contains(m.Withdrawn, d.Name) {
				ms.limited[i] = d.PerMachineLimit
			}
		}
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
	if sl.noDriver {
		return Decision{}, noFit("no driver runs %s", workPhrase(w.Kind, &c))
	}
	// Best fit among the machines that may still fit. One that fails a
	// dynamic rule now fails it for the rest of the pass (Holds only take
	// capacity), so it leaves the alive list.
	best, bestDriver := -1, -1
	n := 0
	for _, k := range sl.alive {
		i := sl.machines[k]
		s, d := f.dynamic(&f.machines[i], &w, &c, sl.drivers[k])
		if s != stageFits {
			continue
		}
		sl.alive[n] = k
		n++
		if best < 0 || f.better(i, best) {
			best, bestDriver = i, d
		}
	}
	sl.alive = sl.alive[:n]
	if best >= 0 {
		return f.decide(best, bestDriver, &w, &c), nil
	}
	if !sl.known {
		// The furthest stage any machine reaches; dynamic stages all come
		// after static ones, and on a tie the first machine by ID names
		// the driver.
		sl.failStage, sl.failDriver = sl.stage, -1
		for k, i := range sl.machines {
			if s, d := f.dynamic(&f.machines[i], &w, &c, sl.drivers[k]); s > sl.failStage {
				sl.failStage, sl.failDriver = s, d
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
	noDriver bool // no driver in the table runs the shape
	// stage is the furthest static stage a machine failed at.
	stage    stage
	machines []int   // in ID order
	drivers  [][]int // per machine, its permitted drivers in preference order
	// alive lists the positions in machines that may still fit.
	alive []int
	// When known, failStage and failDriver are the reason nothing fits,
	// unchanged since no machine of the list has been held on since.
	known      bool
	failStage  stage
	failDriver int
}

// shortlist returns the machines that pass the static rules for w and c:
// those no Hold can change (CanHost, Equipped, a driver that runs it, is
// offered and is permitted, online). It is computed once per shape per pass.
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
	sl := &shortlist{stage: stageHost}
	cands := f.candidates(w, c)
	if len(cands) == 0 {
		sl.noDriver = true
	}
	for _, i := range f.byScope[scope{w.Tenant, w.Region}] {
		ms := &f.machines[i]
		s, permitted := f.static(ms, w, c, cands)
		if s != stageFits {
			sl.stage = max(sl.stage, s)
			continue
		}
		sl.alive = append(sl.alive, len(sl.machines))
		sl.machines = append(sl.machines, i)
		sl.drivers = append(sl.drivers, permitted)
		ms.lists = append(ms.lists, sl)
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
	}
	for _, sl := range ms.lists {
		sl.known = false
	}
}
