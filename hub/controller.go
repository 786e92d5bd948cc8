package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"einsora.dev/edge/hub/placement"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// move puts w in state to, with reason, writes the timeline, and when its
// mode on its machine changes bumps the machine's generation in the same
// transaction and wakes the machine after commit (through wakes).
func (h *Hub) move(tx store.Tx, w *store.Workload, to store.State, reason, text string, wakes *[]string) error {
	before, beforeListed := modeOf(*w)
	w.State, w.Reason, w.Since = to, reason, h.clk.Now()
	after, afterListed := modeOf(*w)
	if w.Machine != "" && (before != after || beforeListed != afterListed) {
		gen, err := tx.BumpGeneration(w.Machine)
		if err != nil {
			return err
		}
		w.ModeGeneration = gen
		*wakes = append(*wakes, w.Machine)
	}
	if err := tx.PutWorkload(*w); err != nil {
		return err
	}
	return h.timeline(tx, w.ID, text)
}

func (h *Hub) timeline(tx store.Tx, workload, text string) error {
	return tx.AddTimeline(store.TimelineEntry{Workload: workload, At: h.clk.Now(), Text: text})
}

// wakeAll wakes the machines' long polls, here and, through the store, on
// every other replica. Call it after the commit that changed them.
func (h *Hub) wakeAll(ids []string) {
	for _, id := range slices.Compact(slices.Sorted(slices.Values(ids))) {
		h.Wake(id)
		h.notifyReplicas(context.Background(), id)
	}
}

// observe moves workloads on the machines that reported since the last
// pass, by what their statuses say.
func (h *Hub) observe(ctx context.Context) error {
	var errs []error
	for _, id := range h.takeDirty() {
		var wakes []string
		err := h.store.Update(ctx, func(tx store.Tx) error {
			wakes = wakes[:0]
			if err := h.fence(tx); err != nil {
				return err
			}
			return h.observeMachine(tx, id, &wakes)
		})
		if errors.Is(err, ErrNotLeader) {
			h.markDirty(id) // for whoever leads next in this process
			return err
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("observe %s: %w", id, err))
			continue
		}
		h.wakeAll(wakes)
	}
	return errors.Join(errs...)
}

func (h *Hub) observeMachine(tx store.Tx, machineID string, wakes *[]string) error {
	m, err := tx.Machine(machineID)
	if err != nil {
		return err
	}
	// Another region's controller observes it; an offline machine's
	// statuses decide nothing.
	if m.Region != h.cfg.Region || !h.online(m) {
		return nil
	}
	statuses, err := tx.Statuses(machineID)
	if err != nil {
		return err
	}
	byWorkload := make(map[string]store.StatusRecord, len(statuses))
	for _, s := range statuses {
		byWorkload[s.Workload] = s
	}
	ws, err := tx.Workloads(store.WorkloadFilter{Machine: machineID})
	if err != nil {
		return err
	}
	for _, w := range ws {
		s, ok := byWorkload[w.ID]
		if !ok && w.State == store.StateProvisioning && m.AppliedGeneration >= w.ModeGeneration {
			// Its agent applied the desired state that lists it and says
			// nothing of it: run it again, under the same attempt.
			*wakes = append(*wakes, m.ID)
			continue
		}
		if !ok || !answers(w, s.Status) {
			continue
		}
		if err := h.apply(tx, &w, s, wakes); err != nil {
			return fmt.Errorf("workload %s: %w", w.ID, err)
		}
	}
	return nil
}

// answers reports whether s answers the attempt and mode the store expects
// of w, applied from a desired state no older than the one that set that
// mode. Anything else is read as still in progress.
func answers(w store.Workload, s protocol.Status) bool {
	mode, listed := modeOf(w)
	return listed && s.Attempt == w.Attempt && s.Mode == mode && s.Generation >= w.ModeGeneration
}

// apply is the observe step's transition table: the workload's state and
// what its machine reported decide its next state.
func (h *Hub) apply(tx store.Tx, w *store.Workload, rec store.StatusRecord, wakes *[]string) error {
	s := rec.Status
	switch w.State {
	case store.StateProvisioning, store.StateRunning:
		switch {
		case s.Code == protocol.CodeRunning && w.State == store.StateProvisioning:
			return h.move(tx, w, store.StateRunning, "", "running on machine "+w.Machine, wakes)
		case s.Code == protocol.CodeProgressing && rec.At.After(w.Progress):
			// New progress extends the provisioning timeout.
			w.Progress = rec.At
			return tx.PutWorkload(*w)
		case failure(s.Code):
			r := reason(s)
			return h.move(tx, w, store.StateFailed, r, "failed: "+r, wakes)
		}
	case store.StateStopping:
		if s.Code == protocol.CodeStopped || s.Code == protocol.CodeExited || s.Code == protocol.CodeRemoved {
			return h.move(tx, w, store.StateStopped, "", "stopped; its data is kept on machine "+w.Machine, wakes)
		}
	case store.StateDeleting:
		if s.Code == protocol.CodeRemoved {
			if err := h.timeline(tx, w.ID, "removed from machine "+w.Machine+" with its data"); err != nil {
				return err
			}
			if err := tx.DeleteWorkload(w.ID); err != nil {
				return err
			}
			if _, err := tx.BumpGeneration(w.Machine); err != nil {
				return err
			}
			*wakes = append(*wakes, w.Machine)
		}
	default:
		// A parked endpoint is removed; once it is, the machine holds
		// nothing of it.
		if w.Kind == protocol.KindEndpoint && s.Code == protocol.CodeRemoved {
			machine := w.Machine
			w.Machine, w.Driver, w.Devices = "", "", nil
			if _, err := tx.BumpGeneration(machine); err != nil {
				return err
			}
			*wakes = append(*wakes, machine)
			if err := tx.PutWorkload(*w); err != nil {
				return err
			}
			return h.timeline(tx, w.ID, "endpoint removed from machine "+machine)
		}
	}
	return nil
}

// admit places every pending or queued workload, in one transaction, so
// capacity is read and taken under the same lock and never over-committed.
func (h *Hub) admit(ctx context.Context) error {
	var wakes []string
	err := h.store.Update(ctx, func(tx store.Tx) error {
		wakes = wakes[:0]
		if err := h.fence(tx); err != nil {
			return err
		}
		waiting, err := tx.Workloads(store.WorkloadFilter{States: []store.State{store.StatePending, store.StateQueued}})
		if err != nil {
			return err
		}
		waiting = slices.DeleteFunc(waiting, func(w store.Workload) bool { return w.Region != h.cfg.Region })
		if len(waiting) == 0 {
			return nil
		}
		ms, err := tx.Machines()
		if err != nil {
			return err
		}
		if !h.settle(ms) {
			return nil
		}
		fleet, classes, err := h.fleet(tx, ms)
		if err != nil {
			return err
		}
		for _, w := range waiting {
			if err := h.admitOne(tx, fleet, classes, &w, &wakes); err != nil {
				return fmt.Errorf("admit %s: %w", w.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("admit: %w", err)
	}
	h.wakeAll(wakes)
	return nil
}

func (h *Hub) admitOne(tx store.Tx, fleet *placement.Fleet, classes map[string]store.Class, w *store.Workload, wakes *[]string) error {
	c, ok := classes[w.Class]
	if !ok {
		return h.queue(tx, w, "its class "+w.Class+" no longer exists")
	}
	pw := placement.Workload{ID: w.ID, Tenant: w.Tenant, Region: w.Region, Kind: w.Kind, Class: w.Class}
	if w.Machine != "" {
		// It has run before and its machine holds its data.
		pw.HeldMachine, pw.HeldDriver = w.Machine, w.Driver
	}
	d, err := fleet.Place(pw, placement.Class(c))
	var nofit *placement.NoFit
	if errors.As(err, &nofit) {
		return h.queue(tx, w, nofit.Reason)
	}
	if err != nil {
		return err
	}
	old := w.Machine
	w.Attempt++
	w.Progress = h.clk.Now()
	if old != "" && old != d.Machine {
		// Its old machine no longer lists it: the agent there stops it and
		// keeps its data.
		if _, err := tx.BumpGeneration(old); err != nil {
			return err
		}
		*wakes = append(*wakes, old)
	}
	text := fmt.Sprintf("placed on machine %s with driver %s as class %s (attempt %d)", d.Machine, d.Driver, c.Name, w.Attempt)
	// The audit trail of admits: which controller, under which epoch.
	h.log.Info("admit: placed", "workload", w.ID, "machine", d.Machine, "driver", d.Driver, "attempt", w.Attempt, "epoch", h.leaderEpoch())
	return h.place(tx, w, d, text, wakes)
}

// place records a placement: state provisioning, new mode generation.
func (h *Hub) place(tx store.Tx, w *store.Workload, d placement.Decision, text string, wakes *[]string) error {
	w.Machine, w.Driver, w.Devices = d.Machine, d.Driver, d.Devices
	gen, err := tx.BumpGeneration(d.Machine)
	if err != nil {
		return err
	}
	w.State, w.Reason, w.Since, w.ModeGeneration = store.StateProvisioning, "", h.clk.Now(), gen
	*wakes = append(*wakes, d.Machine)
	if err := tx.PutWorkload(*w); err != nil {
		return err
	}
	return h.timeline(tx, w.ID, text)
}

// queue leaves w waiting with reason, writing the timeline only when the
// reason changed, so a workload waiting for hours has one line, not
// thousands.
func (h *Hub) queue(tx store.Tx, w *store.Workload, reason string) error {
	if w.State == store.StateQueued && w.Reason == reason {
		return nil
	}
	w.State, w.Reason, w.Since = store.StateQueued, reason, h.clk.Now()
	h.log.Info("admit: queued", "workload", w.ID, "reason", reason, "epoch", h.leaderEpoch())
	if err := tx.PutWorkload(*w); err != nil {
		return err
	}
	return h.timeline(tx, w.ID, "queued: "+reason)
}

// fleet builds placement's view of the machines from the store: validated
// inventory, registration, and what placed workloads hold.
func (h *Hub) fleet(tx store.Tx, ms []store.Machine) (*placement.Fleet, map[string]store.Class, error) {
	classes, err := classMap(tx)
	if err != nil {
		return nil, nil, err
	}
	holding, err := tx.Workloads(store.WorkloadFilter{States: []store.State{store.StateProvisioning, store.StateRunning, store.StateStopping}})
	if err != nil {
		return nil, nil, err
	}
	held := make(map[string][]placement.Held)
	for _, w := range holding {
		c := classes[w.Class]
		held[w.Machine] = append(held[w.Machine], placement.Held{
			Workload: w.ID, Driver: w.Driver, Kind: w.Kind, CPUs: c.CPUs, MemoryMB: c.MemoryMB, Devices: w.Devices,
		})
	}
	pms := make([]placement.Machine, 0, len(ms))
	for _, m := range ms {
		if m.Inventory == nil || m.Revoked {
			continue
		}
		pms = append(pms, placement.Machine{
			ID: m.ID, Owner: m.Owner, Region: m.Region, OS: m.OS, Arch: m.Arch,
			Online: h.online(m),
			CPUs:   m.Inventory.CPUs, MemoryMB: m.Inventory.MemoryMB,
			Devices: placement.DevicesFromInventory(*m.Inventory),
			Drivers: m.Inventory.Drivers,
			Engine:  placement.EngineOf(*m.Inventory),
			Holding: held[m.ID],
		})
	}
	return placement.NewFleet(pms, h.cfg.Drivers), classes, nil
}

// settle reports whether the hub may admit. Right after it starts, it has
// not heard from the machines that were online before, and placing on what
// it happens to know would crowd the first machines back. So it waits until
// every machine that was online when the hub last heard from its fleet (the
// latest sync before this start stands for that moment, however long the
// hub was down), or that registered since, has synced again, or until
// OfflineAfter has passed.
func (h *Hub) settle(ms []store.Machine) bool {
	if h.settled {
		return true
	}
	var lastHeard time.Time
	for _, m := range ms {
		if m.LastSync.Before(h.started) && m.LastSync.After(lastHeard) {
			lastHeard = m.LastSync
		}
	}
	waiting := 0
	for _, m := range ms {
		wasOnline := !m.LastSync.IsZero() && m.LastSync.After(lastHeard.Add(-h.cfg.OfflineAfter))
		registeredSince := !m.Registered.Before(h.started)
		if m.Revoked || !wasOnline && !registeredSince {
			continue
		}
		if m.LastSync.Before(h.started) || m.Inventory == nil {
			waiting++
		}
	}
	now := h.clk.Now()
	if waiting > 0 && now.Sub(h.started) < h.cfg.OfflineAfter {
		h.log.Debug("settling: waiting for machines to reconnect before admitting", "machines", waiting)
		return false
	}
	h.settled = true
	h.log.Info("settled: admitting", "waited", now.Sub(h.started), "missing", waiting)
	return true
}
