package hub

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Desired computes the machine's complete desired state from the store.
func (h *Hub) Desired(ctx context.Context, machineID string) (*protocol.SyncResponse, error) {
	var resp *protocol.SyncResponse
	err := h.store.View(ctx, func(tx store.Tx) error {
		gen, revoked, err := tx.MachineGeneration(machineID)
		if errors.Is(err, store.ErrNotFound) {
			// Removed while its poll waited: answered as any unknown
			// machine is.
			return ErrUnknownMachine
		}
		if err != nil {
			return err
		}
		if revoked {
			// A poll woken by the revocation ends here.
			return ErrRevoked
		}
		// Every change to a machine's desired state bumps its generation
		// in the same transaction, so a state computed for this generation
		// is the state: a wake reads two columns of one row, and a
		// state not cached reads the machine's workloads, not its record.
		if cached, ok := h.desired.Load(machineID); ok && cached.(*desiredState).resp.Generation == gen {
			copied := cached.(*desiredState).resp
			resp = &copied
			return nil
		}
		resp, err = h.computeDesired(tx, machineID, gen)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("desired state of %s: %w", machineID, err)
	}
	resp.HubTime = h.clk.Now()
	return resp, nil
}

// desiredState is a machine's desired state as the cache keeps it: the
// answer, and beside each workload it lists (keys, in the same order)
// what deriving a later state from it needs (derivePlaced).
type desiredState struct {
	resp protocol.SyncResponse
	keys []desiredKey
}

// desiredKey is where a listed workload sorts, as the store lists them
// (oldest first, then by ID), and the class that sizes it.
type desiredKey struct {
	created time.Time
	id      string
	class   string
}

func (k desiredKey) compare(o desiredKey) int {
	if c := k.created.Compare(o.created); c != 0 {
		return c
	}
	return strings.Compare(k.id, o.id)
}

// computeDesired builds machine id's desired state at generation from the
// store and caches it under that generation. A class's size is read at
// each generation: editing a class reaches placed workloads at their
// machine's next change.
func (h *Hub) computeDesired(tx store.Tx, id string, generation int64) (*protocol.SyncResponse, error) {
	ls, err := tx.Listed(id)
	if err != nil {
		return nil, err
	}
	state := &desiredState{resp: protocol.SyncResponse{StoreID: h.store.ID(), Generation: generation, Workloads: []protocol.DesiredWorkload{}}}
	for _, l := range ls {
		h.list(state, id, l)
	}
	h.desired.Store(id, state)
	resp := state.resp
	return &resp, nil
}

// list adds l to state, machine's, unless the machine no longer holds it.
func (h *Hub) list(state *desiredState, machine string, l store.Listed) {
	mode, listed := modeOf(store.Workload{Machine: machine, State: l.State, Kind: l.Kind})
	if !listed {
		return
	}
	spec, mode := h.openSpec(l.ID, l.Spec, mode)
	state.resp.Workloads = append(state.resp.Workloads, protocol.DesiredWorkload{
		ID: l.ID, Attempt: l.Attempt, Mode: mode, Kind: l.Kind, Driver: l.Driver,
		Isolation: h.drivers[l.Driver].Isolation, Image: l.Image,
		Resources:    protocol.Resources{CPUs: l.CPUs, MemoryMB: l.MemoryMB, Devices: l.Devices},
		WorkloadSpec: spec,
	})
	state.keys = append(state.keys, desiredKey{created: l.Created, id: l.ID, class: l.Class})
}

// derivePlaced caches, for each machine an admit batch placed on, its
// desired state at the generation the batch gave it, derived from the
// state cached at the generation before without reading the store: a
// burst's wakes then read two columns each, and a machine's change costs
// what changed, not all it holds (issue 13). placed are the batch's
// placements with their mode generations, and classes the classes it
// read in its transaction; every workload listed is sized again by them,
// as computeDesired would size it.
//
// It runs after the batch commits: a state cached for a generation that
// never committed would be served once another change takes that number.
// A machine whose cached state is not at the generation just before its
// placements (not cached, or bumped again in that transaction, as a move
// away from it does) is left to be computed at its wake.
func (h *Hub) derivePlaced(classes map[string]store.Class, placed []store.Workload) {
	byMachine := make(map[string][]store.Workload)
	var machines []string
	for _, w := range placed {
		if _, ok := byMachine[w.Machine]; !ok {
			machines = append(machines, w.Machine)
		}
		byMachine[w.Machine] = append(byMachine[w.Machine], w)
	}
	for _, id := range machines {
		ws := byMachine[id]
		cached, ok := h.desired.Load(id)
		if !ok || cached.(*desiredState).resp.Generation != ws[0].ModeGeneration-1 {
			continue
		}
		// A wake that computed a newer state meanwhile keeps it.
		h.desired.CompareAndSwap(id, cached, h.derive(cached.(*desiredState), ws[len(ws)-1].ModeGeneration, classes, ws))
	}
}

// derive is prev at generation with placed added, each in place of its
// entry when it was listed already (placed back on the machine that keeps
// its data), and every workload sized by classes.
func (h *Hub) derive(prev *desiredState, generation int64, classes map[string]store.Class, placed []store.Workload) *desiredState {
	replaced := make(map[string]bool, len(placed))
	for _, w := range placed {
		replaced[w.ID] = true
	}
	next := &desiredState{resp: prev.resp, keys: make([]desiredKey, 0, len(prev.keys)+len(placed))}
	next.resp.Generation = generation
	next.resp.Workloads = make([]protocol.DesiredWorkload, 0, len(prev.keys)+len(placed))
	for i, dw := range prev.resp.Workloads {
		k := prev.keys[i]
		if replaced[k.id] {
			continue
		}
		class := classes[k.class]
		dw.Resources.CPUs, dw.Resources.MemoryMB = class.CPUs, class.MemoryMB
		next.resp.Workloads = append(next.resp.Workloads, dw)
		next.keys = append(next.keys, k)
	}
	for _, w := range placed {
		class := classes[w.Class]
		h.list(next, w.Machine, store.Listed{ID: w.ID, Kind: w.Kind, State: w.State, Driver: w.Driver, Image: w.Image, Devices: w.Devices,
			Attempt: w.Attempt, Spec: w.Spec, Class: w.Class, Created: w.Created, CPUs: class.CPUs, MemoryMB: class.MemoryMB})
	}
	sort.Stable(byKey{next})
	return next
}

// byKey sorts a desired state's workloads and their keys together.
type byKey struct{ s *desiredState }

func (b byKey) Len() int           { return len(b.s.keys) }
func (b byKey) Less(i, j int) bool { return b.s.keys[i].compare(b.s.keys[j]) < 0 }
func (b byKey) Swap(i, j int) {
	b.s.keys[i], b.s.keys[j] = b.s.keys[j], b.s.keys[i]
	b.s.resp.Workloads[i], b.s.resp.Workloads[j] = b.s.resp.Workloads[j], b.s.resp.Workloads[i]
}

func classMap(tx store.Tx) (map[string]store.Class, error) {
	cs, err := tx.Classes()
	if err != nil {
		return nil, err
	}
	m := make(map[string]store.Class, len(cs))
	for _, c := range cs {
		m[c.Name] = c
	}
	return m, nil
}

// modeOf is ADR-0016's mapping of a workload's state to its mode on its
// machine. listed is false for a workload the machine no longer holds.
func modeOf(w store.Workload) (mode protocol.Mode, listed bool) {
	if w.Machine == "" {
		return "", false
	}
	switch w.State {
	case store.StateProvisioning, store.StateRunning:
		return protocol.ModeRun, true
	case store.StateDeleting:
		return protocol.ModeRemove, true
	}
	// pending, queued, stopping, stopped, failed: parked, keeping the disk,
	// except endpoints, which keep nothing.
	if w.Kind == protocol.KindEndpoint {
		return protocol.ModeRemove, true
	}
	return protocol.ModePark, true
}
