package placement

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"einsora.dev/edge/protocol"
)

// Issue 13: a controller keeps one Fleet across passes and tells it what
// changed (Update, Remove, SetOnline, NewPass) instead of building one per
// pass. On randomised fleets, machines join, leave, change size, drivers,
// features and presence, and workloads are placed, parked and removed,
// some passes are abandoned (their holds must vanish): every answer of the
// kept Fleet, reasons included, must equal a Fleet built afresh from the
// machines as they stand.
func TestKeptFleetAgreesWithANewOne(t *testing.T) {
	for _, seed := range []uint64{21, 22, 23} {
		t.Run(fmt.Sprint("seed_", seed), func(t *testing.T) {
			w := newWorld(t, seed)
			kept := NewFleet(w.machines, w.drivers)
			joined, left, abandoned := 0, 0, 0
			for round := range 50 {
				for range 20 {
					w.create()
				}
				if w.rng.IntN(5) == 0 {
					// An abandoned pass: its holds are never committed.
					abandoned++
					for _, id := range w.order {
						if sw := w.workloads[id]; !sw.deleted && sw.running == "" {
							kept.Place(sw.w, sw.c)
						}
					}
					kept.NewPass()
				}
				heldOn := w.keptPass(kept)
				for _, id := range heldOn {
					kept.Update(*w.machine(id))
				}
				kept.NewPass()
				changed := map[string]bool{}
				for range 15 {
					if sw := w.pick(running); sw != nil && w.rng.IntN(2) == 0 {
						changed[sw.running] = true
						w.park(sw)
					}
					if sw := w.pick(func(*simWorkload) bool { return true }); sw != nil && w.rng.IntN(3) == 0 {
						if sw.running != "" {
							changed[sw.running] = true
						}
						w.remove(sw)
					}
				}
				for range 3 {
					m := &w.machines[w.rng.IntN(len(w.machines))]
					switch w.rng.IntN(4) {
					case 0:
						m.Online = !m.Online
						kept.SetOnline(m.ID, m.Online)
						continue
					case 1:
						m.CPUs = max(1, m.CPUs+w.rng.IntN(9)-4)
					case 2:
						if len(m.Drivers) > 1 {
							m.Drivers = m.Drivers[1:]
						} else {
							m.Drivers = append(slices.Clone(m.Drivers), "docker")
						}
					case 3:
						m.Region = regions[w.rng.IntN(len(regions))]
					}
					changed[m.ID] = true
				}
				if w.rng.IntN(3) == 0 {
					// A machine joins.
					m := linux(fmt.Sprintf("m-new-%02d", round), tenants[w.rng.IntN(len(tenants))], regions[w.rng.IntN(len(regions))], w.rng.IntN(3))
					m.Online = true
					w.machines = append(w.machines, m)
					changed[m.ID] = true
					joined++
				}
				if w.rng.IntN(4) == 0 {
					// A machine that holds nothing leaves.
					for i, m := range w.machines {
						if len(m.Holding) == 0 && !changed[m.ID] {
							w.machines = slices.Delete(w.machines, i, i+1)
							kept.Remove(m.ID)
							left++
							break
						}
					}
				}
				for id := range changed {
					if m := w.machine(id); m != nil {
						kept.Update(*m)
					}
				}
				if kept.Machines() != len(w.machines) {
					t.Fatalf("round %d: the kept fleet has %d machines, the world %d", round, kept.Machines(), len(w.machines))
				}
			}
			if w.placed < 100 || joined == 0 || left == 0 || abandoned == 0 {
				t.Errorf("the run exercises too little: %d placed, %d joined, %d left, %d passes abandoned", w.placed, joined, left, abandoned)
			}
		})
	}
}

// keptPass places every queued workload through the kept fleet and through
// a fleet built afresh from the world, which must agree, and returns the
// machines it held on.
func (w *world) keptPass(kept *Fleet) []string {
	fresh := NewFleet(w.machines, w.drivers)
	var heldOn []string
	for _, id := range w.order {
		sw := w.workloads[id]
		if sw.deleted || sw.running != "" {
			continue
		}
		if w.rng.IntN(8) == 0 {
			// A machine changes in the middle of the pass: its record
			// (the pass's holds on it included, as the world keeps
			// them) replaces what the kept fleet had.
			m := &w.machines[w.rng.IntN(len(w.machines))]
			if w.rng.IntN(2) == 0 {
				m.Online = !m.Online
				kept.SetOnline(m.ID, m.Online)
			} else {
				m.Features = append(slices.Clone(m.Features), "spec")
				if len(m.Drivers) > 1 {
					m.Drivers = m.Drivers[1:]
				}
				kept.Update(*m)
			}
			fresh = NewFleet(w.machines, w.drivers)
		}
		got, gotErr := kept.Place(sw.w, sw.c)
		want, wantErr := fresh.Place(sw.w, sw.c)
		if !reflect.DeepEqual(got, want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			w.t.Fatalf("pass %s %+v %+v: the kept fleet says %+v, %v; a new one %+v, %v", id, sw.w, sw.c, got, gotErr, want, wantErr)
		}
		if gotErr != nil {
			continue
		}
		w.hold(sw, got)
		heldOn = append(heldOn, got.Machine)
	}
	return heldOn
}

// A machine updated mid-pass is offered again by the lists it stays on,
// even one that had dropped it as full earlier in the pass.
func TestUpdateMidPassOffersTheMachineAgain(t *testing.T) {
	a, b := linux("a", "acme", "eu", 0), linux("b", "acme", "eu", 0)
	a.CPUs, b.CPUs = 2, 1
	f := NewFleet([]Machine{a, b}, DefaultDrivers)
	c := class(t, "cpu-1")
	place := func(id string) string {
		t.Helper()
		d, err := f.Place(wl(id, "acme", "eu", protocol.KindContainer, c.Name), c)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return d.Machine
	}
	// Best fit: b, then b is full and left behind; a.
	if got := []string{place("w1"), place("w2")}; got[0] != "b" || got[1] != "a" {
		t.Fatalf("placed on %v, want [b a]", got)
	}
	b.CPUs = 4 // b grew; its record replaces the pass's hold on it
	f.Update(b)
	if got := []string{place("w3"), place("w4")}; got[0] != "a" || got[1] != "b" {
		t.Fatalf("after b grew, placed on %v, want [a b]", got)
	}
}

// A placement in a busy fleet costs what changed, not the full machines:
// a machine that fitted nothing of a shape is passed over once, and again
// only after what it has free grew. Before, every pass put every full
// machine back on the heap, so the first placement of each pass passed
// over all of them (issue 13).
func TestFullMachinePassedOverOnceUntilItHasRoom(t *testing.T) {
	const full, empty, passes = 300, 20, 10
	c := class(t, "cpu-1")
	var ms []Machine
	for i := range full + empty {
		m := linux(fmt.Sprintf("m-%03d", i), "acme", "eu", 0)
		m.CPUs = 2
		if i < full {
			m.Holding = []Held{{Workload: fmt.Sprintf("old-%03d", i), Driver: "docker", Kind: protocol.KindContainer, CPUs: 2, MemoryMB: 1024}}
		}
		ms = append(ms, m)
	}
	f := NewFleet(ms, DefaultDrivers)
	byID := map[string]*Machine{}
	for i := range ms {
		byID[ms[i].ID] = &ms[i]
	}
	for p := range passes {
		id := fmt.Sprintf("w-%02d", p)
		d, err := f.Place(wl(id, "acme", "eu", protocol.KindContainer, c.Name), c)
		if err != nil {
			t.Fatalf("pass %d: %v", p, err)
		}
		// The pass commits: the machine's record holds the workload.
		m := byID[d.Machine]
		m.Holding = append(m.Holding, Held{Workload: id, Driver: d.Driver, Kind: protocol.KindContainer, CPUs: c.CPUs, MemoryMB: c.MemoryMB})
		f.NewPass()
		f.Update(*m)
	}
	// Each pass may pass over the machine the one before filled, no more.
	if limit := full + passes; f.passedOver > limit {
		t.Errorf("%d passes passed over %d machines, want at most %d: the full ones again at every pass", passes, f.passedOver, limit)
	}
	// One whose workload left has room again, and is the best fit.
	m := byID["m-000"]
	m.Holding = nil
	f.Update(*m)
	if d, err := f.Place(wl("w-back", "acme", "eu", protocol.KindContainer, c.Name), c); err != nil || d.Machine != "m-000" {
		t.Errorf("after m-000 was emptied, placed on %q (%v), want m-000", d.Machine, err)
	}
}
