package hub

import (
	"context"
	"errors"
	"fmt"

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
		if cached, ok := h.desired.Load(machineID); ok && cached.(*protocol.SyncResponse).Generation == gen {
			copied := *cached.(*protocol.SyncResponse)
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

// computeDesired builds machine id's desired state at generation from the
// store and caches it under that generation. A class's size is read at
// each generation: editing a class reaches placed workloads at their
// machine's next change.
func (h *Hub) computeDesired(tx store.Tx, id string, generation int64) (*protocol.SyncResponse, error) {
	resp := &protocol.SyncResponse{StoreID: h.store.ID(), Generation: generation, Workloads: []protocol.DesiredWorkload{}}
	ls, err := tx.Listed(id)
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		mode, listed := modeOf(store.Workload{Machine: id, State: l.State, Kind: l.Kind})
		if !listed {
			continue
		}
		spec, mode := h.openSpec(l.ID, l.Spec, mode)
		resp.Workloads = append(resp.Workloads, protocol.DesiredWorkload{
			ID: l.ID, Attempt: l.Attempt, Mode: mode, Kind: l.Kind, Driver: l.Driver,
			Isolation: h.drivers[l.Driver].Isolation, Image: l.Image,
			Resources:    protocol.Resources{CPUs: l.CPUs, MemoryMB: l.MemoryMB, Devices: l.Devices},
			WorkloadSpec: spec,
		})
	}
	cached := *resp
	h.desired.Store(id, &cached)
	return resp, nil
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
