package hub

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/trust"
	"einsora.dev/edge/protocol"
)

// RegisterMachine records a machine with its owner and region, which only
// registration (enrolment) decides. Registering again keeps everything else.
func (h *Hub) RegisterMachine(ctx context.Context, id, name, owner, region string) error {
	if id == "" || len(id) > protocol.MaxIDLength {
		return fmt.Errorf("%w: machine id %q", ErrInvalid, id)
	}
	err := h.store.Update(ctx, func(tx store.Tx) error {
		m, err := tx.Machine(id)
		if errors.Is(err, store.ErrNotFound) {
			m = store.Machine{ID: id, Registered: h.clk.Now()}
		} else if err != nil {
			return err
		}
		if m.Owner != "" && m.Owner != owner {
			return fmt.Errorf("%w: machine %s belongs to %s; remove it before registering it for %s", ErrInvalid, id, m.Owner, owner)
		}
		m.Name, m.Owner, m.Region = trust.Text(name, maxMachineName), owner, region
		return tx.PutMachine(m)
	})
	if err != nil {
		return err
	}
	// Its owner or region may have changed.
	h.wakeLeader(ctx, true, id)
	return nil
}

// MachineView is a machine with what the hub derives about it.
type MachineView struct {
	store.Machine
	// Online is false for a revoked machine (views.go).
	Online bool
	// Certificates are those the hub issued to it, oldest first; only
	// Machine fills them.
	Certificates []store.Certificate
	// OfflineSince is when an offline machine went silent; zero while
	// it is online.
	OfflineSince time.Time
	// Sim is set when the machine's inventory offers the sim driver,
	// which runs nothing.
	Sim bool
}

// State is the machine's state as the dashboard and the metrics name it:
// revoked, whatever else, then online or offline.
func (v MachineView) State() string { return stateName(v.Revoked, v.Online) }

func stateName(revoked, online bool) string {
	switch {
	case revoked:
		return "revoked"
	case online:
		return "online"
	}
	return "offline"
}

// MachineCount is how many machines of a region are in a state
// (MachineView.State).
type MachineCount struct {
	Region, State string
	N             int
}

// MachineCounts counts every machine by region and state, as Machines
// would show them, from what presence needs of each (store.MachineState):
// a metrics scrape of a large fleet decodes no machine's record.
func (h *Hub) MachineCounts(ctx context.Context) ([]MachineCount, error) {
	var ms []store.MachineState
	if err := h.store.View(ctx, func(tx store.Tx) (err error) { ms, err = tx.MachineStates(); return err }); err != nil {
		return nil, err
	}
	now := h.clk.Now()
	type key struct{ region, state string }
	counts := map[key]int{}
	for _, m := range ms {
		online := !m.Revoked && h.presence.onlineAt(m.Machine, m.LastSync, now)
		counts[key{m.Region, stateName(m.Revoked, online)}]++
	}
	out := make([]MachineCount, 0, len(counts))
	for k, n := range counts {
		out = append(out, MachineCount{Region: k.region, State: k.state, N: n})
	}
	slices.SortFunc(out, func(a, b MachineCount) int {
		return cmp.Or(cmp.Compare(a.Region, b.Region), cmp.Compare(a.State, b.State))
	})
	return out, nil
}

// Machines returns every machine.
func (h *Hub) Machines(ctx context.Context) ([]MachineView, error) {
	var ms []store.Machine
	err := h.store.View(ctx, func(tx store.Tx) (err error) { ms, err = tx.Machines(); return err })
	out := make([]MachineView, len(ms))
	for i, m := range ms {
		out[i] = h.view(m)
	}
	return out, err
}

// Machine returns one machine.
func (h *Hub) Machine(ctx context.Context, id string) (MachineView, error) {
	var m store.Machine
	var cs []store.Certificate
	err := h.store.View(ctx, func(tx store.Tx) (err error) {
		if m, err = tx.Machine(id); err != nil {
			return err
		}
		cs, err = tx.Certificates(id)
		return err
	})
	if err != nil {
		return MachineView{Machine: m}, err
	}
	v := h.view(m)
	v.Certificates = cs
	return v, nil
}

// RemoveMachine forgets a machine, so its ID may enrol again (for another
// owner, say). A machine that still holds workloads is refused: their data
// is there, and deleting it is never the hub's guess.
func (h *Hub) RemoveMachine(ctx context.Context, id string) error {
	err := h.store.Update(ctx, func(tx store.Tx) error {
		ws, err := tx.Workloads(store.WorkloadFilter{Machine: id})
		if err != nil {
			return err
		}
		if len(ws) > 0 {
			return fmt.Errorf("%w: machine %s still holds %d workloads (%s, …); delete them first (einsora-hub workload rm)", ErrInvalid, id, len(ws), ws[0].ID)
		}
		return tx.DeleteMachine(id)
	})
	if err != nil {
		return err
	}
	h.desired.Delete(id)
	h.wakeLeader(ctx, true, id)
	h.log.Info("machine removed", "machine", id)
	return nil
}

// RevokeMachine marks a machine revoked: its certificates are refused from
// now on, at the TLS handshake (resumed sessions included) and on every
// request, and its waiting long poll is ended at once. Its workloads then
// follow the offline rules.
func (h *Hub) RevokeMachine(ctx context.Context, id string) error {
	err := h.store.Update(ctx, func(tx store.Tx) error {
		m, err := tx.Machine(id)
		if err != nil {
			return err
		}
		if m.Revoked {
			return nil
		}
		m.Revoked, m.RevokedAt = true, h.clk.Now()
		return tx.PutMachine(m)
	})
	if err != nil {
		return err
	}
	h.log.Warn("machine revoked", "machine", id)
	// Its poll may be held by any replica, for minutes.
	h.Wake(id)
	h.notifyReplicas(ctx, id)
	h.wakeLeader(ctx, true, id)
	return nil
}

// CheckMachine refuses a machine that is unknown or revoked. The TLS layer
// checks it on every handshake, resumed or not (CheckIdentity).
func (h *Hub) CheckMachine(ctx context.Context, id string) error {
	return h.store.View(ctx, func(tx store.Tx) error { return refuseMachine(tx, id) })
}

// refuseMachine is CheckMachine in tx: an unknown or revoked machine is
// refused (a certRefused); the store's own errors are returned as they are.
func refuseMachine(tx store.Tx, id string) error {
	revoked, err := tx.MachineRevoked(id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &certRefused{fmt.Errorf("machine %s: %w", id, ErrUnknownMachine)}
	case err != nil:
		return err
	case revoked:
		return &certRefused{fmt.Errorf("machine %s: %w", id, ErrRevoked)}
	}
	return nil
}

// MachinesAfter returns one page of machines in ID order: at most limit,
// whose IDs sort after after ("" for the first page). Lists of a large
// fleet use it so a page never reads every machine.
func (h *Hub) MachinesAfter(ctx context.Context, after string, limit int) ([]MachineView, error) {
	var ms []store.Machine
	err := h.store.View(ctx, func(tx store.Tx) (err error) { ms, err = tx.MachinesAfter(after, limit); return err })
	out := make([]MachineView, len(ms))
	for i, m := range ms {
		out[i] = h.view(m)
	}
	return out, err
}

// MachineWorkloads returns the workloads placed on one machine.
func (h *Hub) MachineWorkloads(ctx context.Context, machineID string) (ws []store.Workload, err error) {
	err = h.store.View(ctx, func(tx store.Tx) error {
		ws, err = tx.Workloads(store.WorkloadFilter{Machine: machineID})
		return err
	})
	return ws, err
}
