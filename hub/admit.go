package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"einsora.dev/edge/hub/placement"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// admit places every pending or queued workload, in one transaction, so
// capacity is read and taken under the same lock and never over-committed.
func (c *Controller) admit(ctx context.Context) error {
	var wakes changes
	var placed []placementOutcome // counted once the pass commits
	err := c.store.Update(ctx, func(tx store.Tx) error {
		wakes, placed = wakes[:0], placed[:0]
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
		classes, err := classMap(tx)
		if err != nil {
			return err
		}
		capacity, err := c.backend.Capacity(tx, classes)
		if err != nil || capacity.Settling {
			return err
		}
		fleet := placement.NewFleet(capacity.Machines, c.cfg.Drivers)
		for _, w := range waiting {
			if err := c.admitOne(tx, fleet, classes, &w, &wakes, &placed); err != nil {
				return fmt.Errorf("admit %s: %w", w.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("admit: %w", err)
	}
	tell(c.backend, wakes)
	c.countPlacements(placed)
	return nil
}

func (c *Controller) admitOne(tx store.Tx, fleet *placement.Fleet, classes map[string]store.Class, w *store.Workload, wakes *changes, placed *[]placementOutcome) error {
	class, ok := classes[w.Class]
	if !ok {
		return c.queue(tx, w, "its class "+w.Class+" no longer exists", ReasonClassMissing, placed)
	}
	pw := placement.Workload{ID: w.ID, Tenant: w.Tenant, Region: w.Region, Kind: w.Kind, Class: w.Class, Image: w.Image}
	pw.Ports, pw.Needs = specNeeds(w.Spec)
	if w.Machine != "" {
		// It has run before and its machine holds its data.
		pw.HeldMachine, pw.HeldDriver = w.Machine, w.Driver
	}
	d, err := fleet.Place(pw, placement.Class(class))
	var nofit *placement.NoFit
	if errors.As(err, &nofit) {
		return c.queue(tx, w, nofit.Reason, nofit.Code, placed)
	}
	if err != nil {
		return err
	}
	old := w.Machine
	w.Attempt++
	w.Restarts = 0
	w.Progress = c.clk.Now()
	if old != "" && old != d.Machine {
		// Its old machine no longer lists it: the agent there stops it and
		// keeps its data.
		if _, err := tx.BumpGeneration(old); err != nil {
			return err
		}
		wakes.add(protocol.ModePark, w.ID, old)
	}
	text := fmt.Sprintf("placed on machine %s with driver %s as class %s (attempt %d)", d.Machine, d.Driver, class.Name, w.Attempt)
	// The audit trail of admits: which controller, under which epoch.
	c.log.Info("admit: placed", "workload", w.ID, "machine", d.Machine, "driver", d.Driver, "attempt", w.Attempt, "epoch", c.leaderEpoch())
	*placed = append(*placed, placementOutcome{OutcomePlaced, ReasonNone})
	return c.place(tx, w, d, text, wakes)
}

// place records a placement: state provisioning, new mode generation.
func (c *Controller) place(tx store.Tx, w *store.Workload, d placement.Decision, text string, wakes *changes) error {
	w.Machine, w.Driver, w.Devices = d.Machine, d.Driver, d.Devices
	gen, err := tx.BumpGeneration(d.Machine)
	if err != nil {
		return err
	}
	w.State, w.Reason, w.Since, w.ModeGeneration = store.StateProvisioning, "", c.clk.Now(), gen
	wakes.add(protocol.ModeRun, w.ID, d.Machine)
	if err := tx.PutWorkload(*w); err != nil {
		return err
	}
	return timeline(tx, c.clk.Now(), w.ID, text)
}

// queue leaves w waiting with reason, writing the timeline only when the
// reason changed, so a workload waiting for hours has one line, not
// thousands.
func (c *Controller) queue(tx store.Tx, w *store.Workload, reason, code string, placed *[]placementOutcome) error {
	if w.State == store.StateQueued && w.Reason == reason {
		return nil
	}
	*placed = append(*placed, placementOutcome{OutcomeQueued, code})
	w.State, w.Reason, w.Since = store.StateQueued, reason, c.clk.Now()
	c.log.Info("admit: queued", "workload", w.ID, "reason", reason, "epoch", c.leaderEpoch())
	if err := tx.PutWorkload(*w); err != nil {
		return err
	}
	return timeline(tx, c.clk.Now(), w.ID, "queued: "+reason)
}
