package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"einsora.dev/edge/hub/placement"
	"einsora.dev/edge/hub/store"
)

// admit places every pending or queued workload, in one transaction, so
// capacity is read and taken under the same lock and never over-committed.
func (c *Controller) admit(ctx context.Context) error {
	var wakes []string
	err := c.store.Update(ctx, func(tx store.Tx) error {
		wakes = wakes[:0]
		if err := c.fence(tx); err != nil {
			return err
		}
		waiting, err := tx.Workloads(store.WorkloadFilter{States: []store.State{store.StatePending, store.StateQueued}})
		if err != nil {
			return err
		}
		waiting = slices.DeleteFunc(waiting, func(w store.Workload) bool { return w.Region != c.cfg.Region })
		if len(waiting) == 0 {
			return nil
		}
		ms, err := tx.Machines()
		if err != nil {
			return err
		}
		if !c.settle(ms) {
			return nil
		}
		fleet, classes, err := c.fleet(tx, ms)
		if err != nil {
			return err
		}
		for _, w := range waiting {
			if err := c.admitOne(tx, fleet, classes, &w, &wakes); err != nil {
				return fmt.Errorf("admit %s: %w", w.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("admit: %w", err)
	}
	c.wake(wakes)
	return nil
}

func (c *Controller) admitOne(tx store.Tx, fleet *placement.Fleet, classes map[string]store.Class, w *store.Workload, wakes *[]string) error {
	class, ok := classes[w.Class]
	if !ok {
		return c.queue(tx, w, "its class "+w.Class+" no longer exists")
	}
	pw := placement.Workload{ID: w.ID, Tenant: w.Tenant, Region: w.Region, Kind: w.Kind, Class: w.Class}
	if w.Machine != "" {
		// It has run before and its machine holds its data.
		pw.HeldMachine, pw.HeldDriver = w.Machine, w.Driver
	}
	d, err := fleet.Place(pw, placement.Class(class))
	var nofit *placement.NoFit
	if errors.As(err, &nofit) {
		return c.queue(tx, w, nofit.Reason)
	}
	if err != nil {
		return err
	}
	old := w.Machine
	w.Attempt++
	w.Progress = c.clk.Now()
	if old != "" && old != d.Machine {
		// Its old machine no longer lists it: the agent there stops it and
		// keeps its data.
		if _, err := tx.BumpGeneration(old); err != nil {
			return err
		}
		*wakes = append(*wakes, old)
	}
	text := fmt.Sprintf("placed on machine %s with driver %s as class %s (attempt %d)", d.Machine, d.Driver, class.Name, w.Attempt)
	// The audit trail of admits: which controller, under which epoch.
	c.log.Info("admit: placed", "workload", w.ID, "machine", d.Machine, "driver", d.Driver, "attempt", w.Attempt, "epoch", c.leaderEpoch())
	return c.place(tx, w, d, text, wakes)
}

// place records a placement: state provisioning, new mode generation.
func (c *Controller) place(tx store.Tx, w *store.Workload, d placement.Decision, text string, wakes *[]string) error {
	w.Machine, w.Driver, w.Devices = d.Machine, d.Driver, d.Devices
	gen, err := tx.BumpGeneration(d.Machine)
	if err != nil {
		return err
	}
	w.State, w.Reason, w.Since, w.ModeGeneration = store.StateProvisioning, "", c.clk.Now(), gen
	*wakes = append(*wakes, d.Machine)
	if err := tx.PutWorkload(*w); err != nil {
		return err
	}
	return timeline(tx, c.clk.Now(), w.ID, text)
}

// queue leaves w waiting with reason, writing the timeline only when the
// reason changed, so a workload waiting for hours has one line, not
// thousands.
func (c *Controller) queue(tx store.Tx, w *store.Workload, reason string) error {
	if w.State == store.StateQueued && w.Reason == reason {
		return nil
	}
	w.State, w.Reason, w.Since = store.StateQueued, reason, c.clk.Now()
	c.log.Info("admit: queued", "workload", w.ID, "reason", reason, "epoch", c.leaderEpoch())
	if err := tx.PutWorkload(*w); err != nil {
		return err
	}
	return timeline(tx, c.clk.Now(), w.ID, "queued: "+reason)
}

// fleet builds placement's view of the machines from the store: validated
// inventory, registration, and what placed workloads hold.
func (c *Controller) fleet(tx store.Tx, ms []store.Machine) (*placement.Fleet, map[string]store.Class, error) {
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
		class := classes[w.Class]
		held[w.Machine] = append(held[w.Machine], placement.Held{
			Workload: w.ID, Driver: w.Driver, Kind: w.Kind, CPUs: class.CPUs, MemoryMB: class.MemoryMB, Devices: w.Devices,
		})
	}
	pms := make([]placement.Machine, 0, len(ms))
	for _, m := range ms {
		if m.Inventory == nil || m.Revoked {
			continue
		}
		pms = append(pms, placement.Machine{
			ID: m.ID, Owner: m.Owner, Region: m.Region, OS: m.OS, Arch: m.Arch,
			Online: c.presence.online(m),
			CPUs:   m.Inventory.CPUs, MemoryMB: m.Inventory.MemoryMB,
			Devices: placement.DevicesFromInventory(*m.Inventory),
			Drivers: m.Inventory.Drivers,
			Holding: held[m.ID],
		})
	}
	return placement.NewFleet(pms, c.cfg.Drivers), classes, nil
}

// settle reports whether the hub may admit. Right after it starts, it has
// not heard from the machines that were online before, and placing on what
// it happens to know would crowd the first machines back. So it waits until
// every machine that was online when the hub last heard from its fleet (the
// latest sync before this start stands for that moment, however long the
// hub was down), or that registered since, has synced again, or until
// OfflineAfter has passed.
func (c *Controller) settle(ms []store.Machine) bool {
	if c.settled {
		return true
	}
	var lastHeard time.Time
	for _, m := range ms {
		if m.LastSync.Before(c.started) && m.LastSync.After(lastHeard) {
			lastHeard = m.LastSync
		}
	}
	waiting := 0
	for _, m := range ms {
		wasOnline := c.presence.wasOnline(m, lastHeard)
		registeredSince := !m.Registered.Before(c.started)
		if m.Revoked || !wasOnline && !registeredSince {
			continue
		}
		if m.LastSync.Before(c.started) || m.Inventory == nil {
			waiting++
		}
	}
	now := c.clk.Now()
	if waiting > 0 && c.presence.justStarted() {
		c.log.Debug("settling: waiting for machines to reconnect before admitting", "machines", waiting)
		return false
	}
	c.settled = true
	c.log.Info("settled: admitting", "waited", now.Sub(c.started), "missing", waiting)
	return true
}
