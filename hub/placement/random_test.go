package placement

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"einsora.dev/edge/protocol"
)

// world is the randomised test's own bookkeeping: the fleet with what every
// machine holds, and every workload's state.
type world struct {
	t         *testing.T
	rng       *rand.Rand
	drivers   []Driver
	table     map[string]Driver
	machines  []Machine
	workloads map[string]*simWorkload
	order     []string // workload IDs in creation order, for determinism
	next      int
	placed    int
	// Counters, to show the run exercised what it claims to.
	admits, noFits, stickyPlaced, stickyWaits int
}

type simWorkload struct {
	w       Workload
	c       Class
	running string // machine it is placed on; "" when queued or parked
	deleted bool
}

var (
	tenants = []string{"acme", "globex", "initech"}
	regions = []string{"eu-west", "us-east"}
	classes = append(slices.Clone(DefaultClasses),
		Class{Name: "nvidia-2", Accelerator: AcceleratorNvidiaGPU, Devices: 2, CPUs: 8, MemoryMB: 32768})
)

func newWorld(t *testing.T, seed uint64) *world {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := &world{t: t, rng: rng, drivers: DefaultDrivers, table: DriverTable(DefaultDrivers), workloads: map[string]*simWorkload{}}
	id := 0
	add := func(m Machine) {
		id++
		m.ID = fmt.Sprintf("m-%03d", id)
		m.Owner = tenants[rng.IntN(len(tenants))]
		m.Region = regions[rng.IntN(len(regions))]
		m.Online = rng.IntN(10) > 0
		w.machines = append(w.machines, m)
	}
	for range 10 { // Apple Silicon Macs
		m := mac("", "", "")
		m.CPUs = 8 + 2*rng.IntN(9)
		m.MemoryMB = 16384 << rng.IntN(3)
		if rng.IntN(5) == 0 {
			m.Drivers = []string{"macos-native"}
		}
		add(m)
	}
	add(Machine{OS: "darwin", Arch: "amd64", CPUs: 8, MemoryMB: 16384, Drivers: []string{"macos-native", "vz"}}) // an Intel Mac claiming vz
	for _, gpus := range []int{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 8, 8, 8} {
		m := linux("", "", "", gpus)
		m.CPUs = 4 << rng.IntN(4)
		m.MemoryMB = 8192 << rng.IntN(4)
		switch rng.IntN(6) {
		case 0:
			m.Drivers = []string{"docker"}
		case 1:
			m.Drivers = append(m.Drivers, "sim")
		case 2:
			m.Drivers = append(m.Drivers, "vz", "macos-native") // wrong OS: must be ignored
		}
		if rng.IntN(4) == 0 {
			m.Arch = "arm64"
		}
		add(m)
	}
	unowned := linux("", "", "", 1)
	add(unowned)
	w.machines[len(w.machines)-1].Owner = ""
	return w
}

func (w *world) machine(id string) *Machine {
	for i := range w.machines {
		if w.machines[i].ID == id {
			return &w.machines[i]
		}
	}
	return nil
}

func (w *world) create() {
	w.next++
	id := fmt.Sprintf("w-%05d", w.next)
	kinds := protocol.Kinds
	sw := &simWorkload{
		w: Workload{ID: id, Tenant: tenants[w.rng.IntN(len(tenants))], Region: regions[w.rng.IntN(len(regions))],
			Kind: kinds[w.rng.IntN(len(kinds))], Image: images[w.rng.IntN(len(images))]},
		c: classes[w.rng.IntN(len(classes))],
	}
	sw.w.Class = sw.c.Name
	w.workloads[id] = sw
	w.order = append(w.order, id)
}

// pick returns a random live workload for which ok holds, or nil.
func (w *world) pick(ok func(*simWorkload) bool) *simWorkload {
	var c []*simWorkload
	for _, id := range w.order {
		if sw := w.workloads[id]; !sw.deleted && ok(sw) {
			c = append(c, sw)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[w.rng.IntN(len(c))]
}

func queued(sw *simWorkload) bool  { return sw.running == "" }
func running(sw *simWorkload) bool { return sw.running != "" }

// admit places one queued workload with Place and checks the answer against
// a brute-force reading of the rules.
func (w *world) admit(sw *simWorkload) {
	t := w.t
	d, err := Place(sw.w, sw.c, w.machines, w.drivers)
	want, wantOK := w.oracle(sw)
	w.admits++
	if err != nil {
		w.noFits++
		if sw.w.Sticky() {
			w.stickyWaits++
		}
		var nf *NoFit
		if !errors.As(err, &nf) || nf.Reason == "" {
			t.Fatalf("place %s: error %v is not a *NoFit with a reason", sw.w.ID, err)
		}
		if wantOK {
			t.Fatalf("place %+v %+v: got %q, but %+v fits", sw.w, sw.c, nf.Reason, want)
		}
		return
	}
	if !wantOK {
		t.Fatalf("place %+v %+v: got %+v, but nothing fits", sw.w, sw.c, d)
	}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("place %+v %+v: got %+v, want %+v", sw.w, sw.c, d, want)
	}
	w.hold(sw, d)
}

// images: a macOS guest's (which vz's limit counts), a Linux guest's and
// none.
var images = []string{"https://img.example/UniversalMac.ipsw", "/images/debian.raw", ""}

func (w *world) hold(sw *simWorkload, d Decision) {
	m := w.machine(d.Machine)
	m.Holding = append(m.Holding, Held{Workload: sw.w.ID, Driver: d.Driver, Kind: sw.w.Kind, Image: sw.w.Image,
		CPUs: sw.c.CPUs, MemoryMB: sw.c.MemoryMB, Devices: d.Devices})
	sw.running = d.Machine
	w.placed++
	if sw.w.Sticky() {
		w.stickyPlaced++
	}
	w.checkPlacement(sw, m, d)
}

// pass places every queued workload through one Fleet, checking that each
// answer equals Place's on the bookkeeping as it stands.
func (w *world) pass() {
	f := NewFleet(w.machines, w.drivers)
	for _, id := range w.order {
		sw := w.workloads[id]
		if sw.deleted || sw.running != "" {
			continue
		}
		got, gotErr := f.Place(sw.w, sw.c)
		want, wantErr := Place(sw.w, sw.c, w.machines, w.drivers)
		if !reflect.DeepEqual(got, want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			w.t.Fatalf("pass %s: fleet says %+v, %v; Place says %+v, %v", id, got, gotErr, want, wantErr)
		}
		if gotErr != nil {
			continue
		}
		w.hold(sw, got)
	}
}

// release takes sw off its machine.
func (w *world) release(sw *simWorkload) {
	m := w.machine(sw.running)
	m.Holding = slices.DeleteFunc(m.Holding, func(h Held) bool { return h.Workload == sw.w.ID })
	sw.running = ""
}

func (w *world) park(sw *simWorkload) {
	m := w.machine(sw.running)
	var driver string
	for _, h := range m.Holding {
		if h.Workload == sw.w.ID {
			driver = h.Driver
		}
	}
	// Every kind remembers where it ran; only VMs and notebooks are sticky.
	sw.w.HeldMachine, sw.w.HeldDriver = m.ID, driver
	w.release(sw)
}

func (w *world) remove(sw *simWorkload) {
	if sw.running != "" {
		w.release(sw)
	}
	sw.deleted = true
}

// oracle finds the decision by trying every machine and driver with the
// rule functions alone.
func (w *world) oracle(sw *simWorkload) (Decision, bool) {
	ds := slices.Clone(w.drivers)
	slices.SortStableFunc(ds, func(a, b Driver) int {
		if c := cmp.Compare(b.Isolation, a.Isolation); c != 0 {
			return c
		}
		if a.Weak != b.Weak {
			if a.Weak {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Name, b.Name)
	})
	for _, m := range w.machines {
		for _, h := range m.Holding {
			if h.Workload == sw.w.ID {
				return Decision{}, false
			}
		}
	}
	var best *Machine
	var bestD Driver
	var bestFree Free
	for i := range w.machines {
		m := &w.machines[i]
		if sw.w.Sticky() && m.ID != sw.w.HeldMachine {
			continue
		}
		if !m.CanHost(sw.w) || !m.Online || !m.Equipped(sw.c) {
			continue
		}
		free := m.Free()
		if !free.Fits(sw.c) {
			continue
		}
		var chosen *Driver
		for j := range ds {
			d := &ds[j]
			if sw.w.Sticky() && sw.w.HeldDriver != "" && d.Name != sw.w.HeldDriver {
				continue
			}
			if d.Runs(sw.w.Kind, sw.c.Accelerator) && m.Offers(*d) && m.Permits(sw.w, *d) && (!d.Counts(sw.w.Image) || d.Allows(m.HeldWith(*d))) {
				chosen = d
				break
			}
		}
		if chosen == nil {
			continue
		}
		if best == nil || cmp.Or(
			cmp.Compare(free.devices(), bestFree.devices()),
			cmp.Compare(free.CPUs, bestFree.CPUs),
			cmp.Compare(free.MemoryMB, bestFree.MemoryMB),
			cmp.Compare(m.ID, best.ID)) < 0 {
			best, bestD, bestFree = m, *chosen, free
		}
	}
	if best == nil {
		return Decision{}, false
	}
	d := Decision{Machine: best.ID, Driver: bestD.Name, Isolation: bestD.Isolation}
	if sw.c.Devices > 0 {
		d.Devices = bestFree.Devices[sw.c.accelerator()][:sw.c.Devices]
	}
	return d, true
}

// checkPlacement asserts the trust and sticky rules for one placement.
func (w *world) checkPlacement(sw *simWorkload, m *Machine, d Decision) {
	t := w.t
	drv, ok := w.table[d.Driver]
	switch {
	case !ok:
		t.Fatalf("%s placed with unknown driver %s", sw.w.ID, d.Driver)
	case !m.Online:
		t.Fatalf("%s placed on offline machine %s", sw.w.ID, m.ID)
	case m.Owner == "" || m.Owner != sw.w.Tenant:
		t.Fatalf("%s of tenant %s placed on machine %s of %q", sw.w.ID, sw.w.Tenant, m.ID, m.Owner)
	case m.Region != sw.w.Region:
		t.Fatalf("%s of region %s placed in %s", sw.w.ID, sw.w.Region, m.Region)
	case drv.Weak && m.Owner != sw.w.Tenant:
		t.Fatalf("%s placed with weak driver %s on another owner's machine", sw.w.ID, d.Driver)
	case !drv.FitsPlatform(m.OS, m.Arch) || !slices.Contains(m.Drivers, d.Driver):
		t.Fatalf("%s placed with driver %s that machine %s (%s/%s, %v) does not offer", sw.w.ID, d.Driver, m.ID, m.OS, m.Arch, m.Drivers)
	case !drv.Runs(sw.w.Kind, sw.c.Accelerator):
		t.Fatalf("%s (%s, %s) placed with driver %s that does not run it", sw.w.ID, sw.w.Kind, sw.c.Accelerator, d.Driver)
	case d.Isolation != drv.Isolation:
		t.Fatalf("%s: decision isolation %v, table says %v", sw.w.ID, d.Isolation, drv.Isolation)
	case sw.w.Sticky() && d.Machine != sw.w.HeldMachine:
		t.Fatalf("sticky %s placed on %s, its disk is on %s", sw.w.ID, d.Machine, sw.w.HeldMachine)
	case sw.w.Sticky() && sw.w.HeldDriver != "" && d.Driver != sw.w.HeldDriver:
		t.Fatalf("sticky %s placed with %s, its data is in %s", sw.w.ID, d.Driver, sw.w.HeldDriver)
	case len(d.Devices) != sw.c.Devices:
		t.Fatalf("%s got %d devices for class %s", sw.w.ID, len(d.Devices), sw.c.Name)
	}
}

// check asserts after every step that nothing is over-committed and that no
// workload runs in two places.
func (w *world) check() {
	t := w.t
	table := w.table
	where := map[string]string{}
	for _, m := range w.machines {
		cpus, mem := 0, 0
		devs := map[string]bool{}
		perDriver := map[string]int{}
		for _, h := range m.Holding {
			if on, dup := where[h.Workload]; dup {
				t.Fatalf("workload %s runs on %s and %s", h.Workload, on, m.ID)
			}
			where[h.Workload] = m.ID
			cpus += h.CPUs
			mem += h.MemoryMB
			if table[h.Driver].Counts(h.Image) {
				perDriver[h.Driver]++
			}
			for _, id := range h.Devices {
				if devs[id] {
					t.Fatalf("device %s on %s held twice", id, m.ID)
				}
				devs[id] = true
				known := false
				for _, ids := range m.Devices {
					known = known || slices.Contains(ids, id)
				}
				if !known {
					t.Fatalf("device %s is not on machine %s", id, m.ID)
				}
			}
		}
		if cpus > m.CPUs || mem > m.MemoryMB {
			t.Fatalf("machine %s over-committed: %d/%d CPUs, %d/%d MB", m.ID, cpus, m.CPUs, mem, m.MemoryMB)
		}
		for name, n := range perDriver {
			if !table[name].Allows(n - 1) {
				t.Fatalf("machine %s holds %d with %s, limit %d", m.ID, n, name, table[name].PerMachineLimit)
			}
		}
	}
	for _, id := range w.order {
		sw := w.workloads[id]
		if got := where[id]; got != sw.running {
			t.Fatalf("workload %s: bookkeeping says %q, holdings say %q", id, sw.running, got)
		}
	}
}

func TestRandomisedFleet(t *testing.T) {
	steps := 6000
	if testing.Short() {
		steps = 500
	}
	for _, seed := range []uint64{1, 2, 3, 20261025} {
		t.Run(fmt.Sprint("seed_", seed), func(t *testing.T) {
			w := newWorld(t, seed)
			for range 40 {
				w.create()
			}
			for range steps {
				switch r := w.rng.IntN(100); {
				case r < 14:
					w.create()
				case r < 50:
					if sw := w.pick(queued); sw != nil {
						w.admit(sw)
					}
				case r < 52:
					w.pass()
				case r < 70:
					if sw := w.pick(running); sw != nil {
						w.park(sw)
					}
				case r < 85:
					// Deletes favour queued workloads, as users give up on waiting.
					if sw := w.pick(func(sw *simWorkload) bool { return queued(sw) == (r < 80) }); sw != nil {
						w.remove(sw)
					}
				case r < 95:
					m := &w.machines[w.rng.IntN(len(w.machines))]
					m.Online = !m.Online
				default:
					// The agent stops or starts offering a driver.
					m := &w.machines[w.rng.IntN(len(w.machines))]
					if len(m.Drivers) > 0 && w.rng.IntN(2) == 0 {
						m.Drivers = slices.Delete(slices.Clone(m.Drivers), 0, 1)
					} else {
						m.Drivers = append(slices.Clone(m.Drivers), DefaultDrivers[w.rng.IntN(len(DefaultDrivers))].Name)
					}
				}
				w.check()
			}
			if w.placed < steps/20 || w.noFits < steps/20 || w.stickyPlaced == 0 || w.stickyWaits == 0 {
				t.Errorf("the run exercises too little: %d placements, %d no-fits, %d sticky placed, %d sticky waits",
					w.placed, w.noFits, w.stickyPlaced, w.stickyWaits)
			}
			t.Logf("%d steps: %d single admits (%d no-fits, %d of them sticky waits); %d placements in all, passes included (%d sticky)",
				steps, w.admits, w.noFits, w.stickyWaits, w.placed, w.stickyPlaced)
		})
	}
}

// TestFleetPassAgreesWithPlace runs whole admit passes through one Fleet and
// checks every answer, reasons included, against Place on the machines with
// the pass's holds added.
func TestFleetPassAgreesWithPlace(t *testing.T) {
	for _, seed := range []uint64{5, 6, 7} {
		t.Run(fmt.Sprint("seed_", seed), func(t *testing.T) {
			w := newWorld(t, seed)
			for range 8 {
				for range 150 {
					w.create()
				}
				w.pass()
				w.check()
				for range 60 {
					if sw := w.pick(running); sw != nil {
						w.park(sw)
					}
					if sw := w.pick(queued); sw != nil && w.rng.IntN(2) == 0 {
						w.remove(sw)
					}
				}
				m := &w.machines[w.rng.IntN(len(w.machines))]
				m.Online = !m.Online
				w.check()
			}
			if w.placed < 200 {
				t.Errorf("only %d placements", w.placed)
			}
		})
	}
}
