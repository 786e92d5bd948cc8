package hub

import (
	"context"
	"errors"
	"fmt"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// observeBatch is the most machines one observation transaction reads
// and writes. One transaction a machine kept admission waiting behind a
// fleet's reports: a burst of 10,000 workloads starting is 10,000 reports
// to observe, in the same pass goroutine that admits what still waits.
const observeBatch = 200

// observe moves workloads on the machines that reported since the last
// pass, by what their statuses say: observeBatch machines a transaction.
// A batch that fails is observed again a machine at a time, so one
// machine's failure holds back no other.
func (c *Controller) observe(ctx context.Context) error {
	ids := c.takeDirty()
	var errs []error
	for len(ids) > 0 {
		batch := ids[:min(len(ids), observeBatch)]
		ids = ids[len(batch):]
		err := c.observeMachines(ctx, batch)
		switch {
		case err == nil || errors.Is(err, ErrNotLeader):
		case len(batch) == 1:
			errs = append(errs, fmt.Errorf("observe %s: %w", batch[0], err))
		default:
			batch, err = c.observeEach(ctx, batch, &errs)
		}
		if errors.Is(err, ErrNotLeader) {
			// For whoever leads next in this process.
			c.markDirty(append(batch, ids...)...)
			return err
		}
	}
	return errors.Join(errs...)
}

// observeEach observes ids a transaction each, adding each machine's
// failure to errs. On ErrNotLeader it stops, returning the machines it has
// yet to observe.
func (c *Controller) observeEach(ctx context.Context, ids []string, errs *[]error) ([]string, error) {
	for i, id := range ids {
		err := c.observeMachines(ctx, []string{id})
		if errors.Is(err, ErrNotLeader) {
			return ids[i:], err
		}
		if err != nil {
			*errs = append(*errs, fmt.Errorf("observe %s: %w", id, err))
		}
	}
	return nil, nil
}

// observeMachines observes ids in one transaction fenced by the epoch.
func (c *Controller) observeMachines(ctx context.Context, ids []string) error {
	var wakes changes
	var freed []string
	var heard []store.LastSync
	err := c.store.Update(ctx, func(tx store.Tx) error {
		wakes, freed, heard = wakes[:0], freed[:0], heard[:0]
		if err := c.fence(tx); err != nil {
			return err
		}
		wb := newWriteBehind(tx)
		for _, id := range ids {
			if err := c.observeMachine(wb, id, &wakes, &freed, &heard); err != nil {
				return err
			}
		}
		return wb.flush()
	})
	if err != nil {
		return err
	}
	tell(c.backend, wakes)
	// The capacity view reads again only the machines whose workloads
	// stopped holding capacity: a burst's reports of workloads now
	// running had it read the whole region again (issue 13). Those that
	// came back online are judged so by the last syncs read here.
	c.backend.Observed(heard)
	c.backend.Changed(freed...)
	c.capGen.Add(1)
	return nil
}

func (c *Controller) observeMachine(tx store.Tx, machineID string, wakes *changes, freed *[]string, heard *[]store.LastSync) error {
	obs, ok, err := c.backend.Observe(tx, machineID)
	if err != nil || !ok {
		return err
	}
	*heard = append(*heard, store.LastSync{Machine: machineID, At: obs.lastSync})
	ws, err := tx.Workloads(store.WorkloadFilter{Machine: machineID})
	if err != nil {
		return err
	}
	freedHere := false
	for _, w := range ws {
		s, ok := obs.Statuses[w.ID]
		if w.State == store.StateProvisioning && obs.Absent(w) {
			// Its runtime applied the desired state that lists it and says
			// nothing of it: run it again, under the same attempt.
			wakes.add(protocol.ModeRun, w.ID, machineID)
			continue
		}
		if !ok || !answers(w, s.Status) {
			continue
		}
		if err := noteRestarts(tx, c, &w, s.Status); err != nil {
			return fmt.Errorf("workload %s: %w", w.ID, err)
		}
		held := holds(w)
		if err := c.apply(tx, &w, s, wakes); err != nil {
			return fmt.Errorf("workload %s: %w", w.ID, err)
		}
		freedHere = freedHere || held && !holds(w)
	}
	if freedHere {
		*freed = append(*freed, machineID)
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
func (c *Controller) apply(tx store.Tx, w *store.Workload, rec store.StatusRecord, wakes *changes) error {
	s := rec.Status
	switch w.State {
	case store.StateProvisioning, store.StateRunning:
		switch {
		case s.Code == protocol.CodeRunning && w.State == store.StateProvisioning:
			return move(tx, c.clk.Now(), w, store.StateRunning, "", "running on machine "+w.Machine, wakes)
		case s.Code == protocol.CodeProgressing && rec.At.After(w.Progress):
			// New progress extends the provisioning timeout.
			w.Progress = rec.At
			return tx.PutWorkload(*w)
		case failure(s.Code):
			r := reason(s)
			return move(tx, c.clk.Now(), w, store.StateFailed, r, "failed: "+r, wakes)
		}
	case store.StateStopping:
		if s.Code == protocol.CodeStopped || s.Code == protocol.CodeExited || s.Code == protocol.CodeRemoved {
			return move(tx, c.clk.Now(), w, store.StateStopped, "", "stopped; its data is kept on machine "+w.Machine, wakes)
		}
	case store.StateDeleting:
		if s.Code == protocol.CodeRemoved {
			if err := timeline(tx, c.clk.Now(), w.ID, "removed from machine "+w.Machine+" with its data"); err != nil {
				return err
			}
			if err := tx.DeleteWorkload(w.ID); err != nil {
				return err
			}
			if _, err := tx.BumpGeneration(w.Machine); err != nil {
				return err
			}
			wakes.add(protocol.ModeRemove, w.ID, w.Machine)
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
			wakes.add(protocol.ModeRemove, w.ID, machine)
			if err := tx.PutWorkload(*w); err != nil {
				return err
			}
			return timeline(tx, c.clk.Now(), w.ID, "endpoint removed from machine "+machine)
		}
	}
	return nil
}
