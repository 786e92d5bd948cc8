package hub

import (
	"context"
	"fmt"

	"einsora.dev/edge/hub/store"
)

// sweep fails what is stuck: the running workloads of machines offline for
// OfflineFailAfter (and stops their stopping ones), and workloads that
// provisioned for ProvisioningTimeout without progress.
func (h *Hub) sweep(ctx context.Context) error {
	var wakes []string
	err := h.store.Update(ctx, func(tx store.Tx) error {
		wakes = wakes[:0]
		if err := h.fence(tx); err != nil {
			return err
		}
		ms, err := tx.Machines()
		if err != nil {
			return err
		}
		var gone []store.Machine
		heard := false
		for _, m := range ms {
			if m.Region != h.cfg.Region || m.LastSync.IsZero() {
				continue
			}
			heard = heard || h.presence.heard(m)
			if h.presence.gone(m) {
				gone = append(gone, m)
			}
		}
		if len(gone) > 0 && !heard {
			// Every machine went silent at once: that is the hub's
			// network, not the fleet. Fail nothing.
			h.logSilence(len(gone))
			gone = nil
		} else {
			h.silent = false
		}
		for _, m := range gone {
			if err := h.failOffline(tx, m, &wakes); err != nil {
				return err
			}
		}
		return h.failStuck(tx, &wakes)
	})
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	h.wakeAll(wakes)
	return nil
}

func (h *Hub) logSilence(machines int) {
	if h.silent {
		return
	}
	h.silent = true
	h.log.Warn("every machine is silent: suspecting the hub's own network, not the fleet; failing no workload until one is heard",
		"machines", machines)
}

func (h *Hub) failOffline(tx store.Tx, m store.Machine, wakes *[]string) error {
	ws, err := tx.Workloads(store.WorkloadFilter{Machine: m.ID, States: []store.State{store.StateRunning, store.StateStopping}})
	if err != nil {
		return err
	}
	mins := int(h.cfg.OfflineFailAfter.Minutes())
	for _, w := range ws {
		if w.State == store.StateRunning {
			r := fmt.Sprintf("its machine has been offline for %d minutes", mins)
			if err := h.move(tx, &w, store.StateFailed, r, "failed: "+r, wakes); err != nil {
				return err
			}
			continue
		}
		if err := h.move(tx, &w, store.StateStopped, "", fmt.Sprintf("stopped: its machine has been offline for %d minutes", mins), wakes); err != nil {
			return err
		}
	}
	return nil
}

// failStuck fails the workloads of this region that have provisioned for
// ProvisioningTimeout since they were placed or last reported progress.
func (h *Hub) failStuck(tx store.Tx, wakes *[]string) error {
	ws, err := tx.Workloads(store.WorkloadFilter{States: []store.State{store.StateProvisioning}})
	if err != nil {
		return err
	}
	now := h.clk.Now()
	for _, w := range ws {
		if w.Region != h.cfg.Region {
			continue
		}
		since := w.Since
		if w.Progress.After(since) {
			since = w.Progress
		}
		if since.Before(h.started) {
			since = h.started // the hub's downtime is not the workload's
		}
		if now.Sub(since) < h.cfg.ProvisioningTimeout {
			continue
		}
		r := fmt.Sprintf("it did not start within %s", h.cfg.ProvisioningTimeout)
		if err := h.move(tx, &w, store.StateFailed, r, "failed: "+r, wakes); err != nil {
			return err
		}
	}
	return nil
}
