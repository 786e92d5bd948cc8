package hub

import (
	"context"
	"fmt"
	"time"

	"einsora.dev/edge/hub/store"
)

// sweep fails what is stuck: the running workloads of machines offline for
// OfflineFailAfter (and stops their stopping ones), and workloads that
// provisioned for ProvisioningTimeout without progress.
func (c *Controller) sweep(ctx context.Context) error {
	var (
		wakes   changes
		touched []string
		ls      []store.LastSync
	)
	err := c.store.Update(ctx, func(tx store.Tx) error {
		wakes, touched = wakes[:0], touched[:0]
		if err := c.fence(tx); err != nil {
			return err
		}
		// Only last syncs: the sweep runs every ControllerInterval, and
		// decoding every machine's record made it cost the region each time.
		var err error
		if ls, err = tx.LastSyncs(c.cfg.Region); err != nil {
			return err
		}
		var gone []store.LastSync
		heard := false
		for _, l := range ls {
			if l.At.IsZero() {
				continue
			}
			heard = heard || c.presence.heard(l)
			if c.presence.gone(l) {
				gone = append(gone, l)
			}
		}
		switch {
		case len(gone) > 0 && c.presence.blind():
			c.logBlind(len(gone))
			gone = nil
		case len(gone) > 0 && !heard:
			// Every machine went silent at once: that is the hub's
			// network, not the fleet. Fail nothing.
			c.logSilence(len(gone))
			gone = nil
		default:
			c.silent, c.blind = false, false
		}
		for _, l := range gone {
			if err := c.failOffline(tx, l.Machine, &wakes); err != nil {
				return err
			}
			// Stopping ones stopped without a new mode: no wake says so.
			touched = append(touched, l.Machine)
		}
		return c.failStuck(tx, &wakes)
	})
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	// The capacity view judges presence by the last syncs it keeps: the
	// sweep's read is their refresh, so no other whole read is needed.
	c.admitMu.Lock()
	missed := c.backend.Heard(ls)
	c.admitMu.Unlock()
	if missed > 0 {
		// A machine joined (or went) without the view being told.
		c.capacityChanged()
	}
	if len(wakes) > 0 {
		// What it failed or stopped no longer holds capacity.
		c.capGen.Add(1)
	}
	c.backend.Changed(touched...)
	c.backend.Changed(machinesOf(refsOf(wakes))...)
	tell(c.backend, wakes)
	if err := c.retain(ctx); err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	return nil
}

// logBlind says, once per spell, why machines that look gone are not
// failed.
func (c *Controller) logBlind(machines int) {
	if c.blind {
		return
	}
	c.blind = true
	c.log.Warn("this hub's presence writes lag or it just started: failing nothing for being offline", "machines", machines)
}

func (c *Controller) logSilence(machines int) {
	if c.silent {
		return
	}
	c.silent = true
	c.log.Warn("every machine is silent: suspecting the hub's own network, not the fleet; failing no workload until one is heard",
		"machines", machines)
}

func (c *Controller) failOffline(tx store.Tx, machineID string, wakes *changes) error {
	ws, err := tx.Workloads(store.WorkloadFilter{Machine: machineID, States: []store.State{store.StateRunning, store.StateStopping}})
	if err != nil {
		return err
	}
	span := spell(c.cfg.OfflineFailAfter)
	for _, w := range ws {
		if w.State == store.StateRunning {
			r := "its machine has been offline for " + span
			if err := move(tx, c.clk.Now(), &w, store.StateFailed, r, "failed: "+r, wakes); err != nil {
				return err
			}
			continue
		}
		if err := move(tx, c.clk.Now(), &w, store.StateStopped, "", "stopped: its machine has been offline for "+span, wakes); err != nil {
			return err
		}
	}
	return nil
}

// failStuck fails the workloads of this region that have provisioned for
// ProvisioningTimeout since they were placed or last reported progress.
func (c *Controller) failStuck(tx store.Tx, wakes *changes) error {
	ws, err := tx.Workloads(store.WorkloadFilter{States: []store.State{store.StateProvisioning}})
	if err != nil {
		return err
	}
	now := c.clk.Now()
	for _, w := range ws {
		if w.Region != c.cfg.Region {
			continue
		}
		since := w.Since
		if w.Progress.After(since) {
			since = w.Progress
		}
		if since.Before(c.started) {
			since = c.started // the hub's downtime is not the workload's
		}
		if now.Sub(since) < c.cfg.ProvisioningTimeout {
			continue
		}
		r := fmt.Sprintf("it did not start within %s", c.cfg.ProvisioningTimeout)
		if err := move(tx, c.clk.Now(), &w, store.StateFailed, r, "failed: "+r, wakes); err != nil {
			return err
		}
	}
	return nil
}

// spell says d for a reason or timeline line: whole minutes as "10
// minutes", anything shorter (a test's --offline-fail-after) as "20s",
// never "0 minutes".
func spell(d time.Duration) string {
	switch {
	case d == time.Minute:
		return "1 minute"
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%d minutes", int(d/time.Minute))
	default:
		return d.String()
	}
}
