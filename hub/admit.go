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

// admitBatch is the most waiting workloads one admission transaction
// reads and writes: a backlog of any size is taken a batch at a time, each
// batch fenced by the epoch, so no transaction outlives the lease.
const admitBatch = 500

// admission is where the controller's scan of queued workloads stands.
// Queued workloads fit nowhere when last examined, so they are examined
// again only after capacity may have grown (capGen moved), not on every
// pass; pending ones are new and always examined. Only the pass goroutine
// touches it.
type admission struct {
	// scanned is the capacity generation the last complete scan of the
	// queued workloads started at; scanning, whether one is under way,
	// and gen the generation it started at.
	scanned, gen uint64
	scanning     bool
	// after is the last workload the scan under way examined.
	afterCreated time.Time
	afterID      string
}

// capacityChanged tells the controller that capacity may have grown: a
// machine joined, came back, reported or changed its inventory, or a
// workload released what it held. What waits is examined again.
func (c *Controller) capacityChanged() {
	c.capGen.Add(1)
	c.wakeController()
}

// admit places what waits, a batch at a time: the queued workloads when
// capacity changed since they were last examined (oldest first), then the
// pending ones. Capacity is read and taken in each batch's transaction, so
// it is never over-committed. A pass spends at most half of admitBudget
// on the queued scan and the rest on pending work, at least one batch of
// each; what remains waits for the next pass, kicked at once. So a backlog
// that fits nowhere delays neither new work that fits nor observing and
// sweeping. (New work may so take capacity before an older queued
// workload the scan has yet to reach.)
func (c *Controller) admit(ctx context.Context) error {
	c.admitMu.Lock()
	defer c.admitMu.Unlock()
	start := c.clk.Now()
	a := &c.admission
	if gen := c.capGen.Load(); !a.scanning && a.scanned != gen {
		a.scanning, a.gen, a.afterCreated, a.afterID = true, gen, time.Time{}, ""
	}
	for a.scanning {
		f := store.WorkloadFilter{States: []store.State{store.StateQueued}, Region: c.cfg.Region,
			AfterCreated: a.afterCreated, AfterID: a.afterID, Limit: admitBatch}
		last, n, err := c.admitBatch(ctx, f)
		if errors.Is(err, errSettling) {
			return nil
		}
		if errors.Is(err, errViewStale) {
			// A machine changed just before the batch: nothing was
			// placed; the next pass, kicked now, reads it afresh.
			c.wakeController()
			return nil
		}
		if err != nil {
			return err
		}
		if n < admitBatch {
			// Capacity that changed during the scan is scanned for
			// again: scanned stays behind capGen.
			a.scanning, a.scanned = false, a.gen
			break
		}
		a.afterCreated, a.afterID = last.Created, last.ID
		if c.clk.Now().Sub(start) >= c.admitBudget()/2 {
			c.wakeController()
			break
		}
	}
	for {
		// Each batch places or queues every workload it reads, so the
		// next batch's first page is new ones.
		f := store.WorkloadFilter{States: []store.State{store.StatePending}, Region: c.cfg.Region, Limit: admitBatch}
		_, n, err := c.admitBatch(ctx, f)
		if errors.Is(err, errSettling) {
			return nil
		}
		if errors.Is(err, errViewStale) {
			// A machine changed just before the batch: nothing was
			// placed; the next pass, kicked now, reads it afresh.
			c.wakeController()
			return nil
		}
		if err != nil || n < admitBatch {
			return err
		}
		if c.clk.Now().Sub(start) >= c.admitBudget() {
			c.wakeController()
			return nil
		}
	}
}

// admitBudget is how long one pass may spend admitting, and how long one
// batch's transaction may take: well inside the lease, which is renewed
// on its own schedule meanwhile.
func (c *Controller) admitBudget() time.Duration { return c.cfg.LeaseTTL / 5 }

// errSettling: nothing is decided before the fleet has settled; the scan
// stands still.
var errSettling = errors.New("the fleet is settling")

// decision is one committed admission decision, for the audit log and
// the metrics: placed when machine is set, else queued with reason and its
// fixed code.
type decision struct {
	workload, machine, driver, reason, code string
	attempt                                 int64
}

// admitBatch admits the workloads f selects in one transaction fenced by
// the epoch. It returns the last workload it read and how many it read.
// The audit log is written after the commit, once per committed decision,
// with the epoch that committed it: a retried or refused transaction logs
// nothing.
func (c *Controller) admitBatch(ctx context.Context, f store.WorkloadFilter) (last store.Workload, n int, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.admitBudget())
	defer cancel()
	var (
		wakes    changes
		decided  []decision
		writes   admitWrites
		classes  map[string]store.Class
		epoch    int64
		settling bool
	)
	c.backend.Prepare()
	err = c.store.Update(ctx, func(tx store.Tx) error {
		wakes, decided, last, n, settling = wakes[:0], decided[:0], store.Workload{}, 0, false
		writes.placed, writes.queued = writes.placed[:0], writes.queued[:0]
		var err error
		if epoch, err = c.fenced(tx); err != nil {
			return err
		}
		waiting, err := tx.Workloads(f)
		if err != nil || len(waiting) == 0 {
			return err
		}
		last, n = waiting[len(waiting)-1], len(waiting)
		if classes, err = classMap(tx); err != nil {
			return err
		}
		capacity, err := c.backend.Capacity(tx, classes)
		if err != nil {
			return err
		}
		if capacity.Settling {
			settling = true
			return nil
		}
		fleet := capacity.Fleet
		for _, w := range waiting {
			if err := c.admitOne(tx, fleet, classes, &w, &wakes, &decided, &writes); err != nil {
				return fmt.Errorf("admit %s: %w", w.ID, err)
			}
		}
		return c.write(tx, &writes)
	})
	if err != nil {
		return store.Workload{}, 0, fmt.Errorf("admit: %w", err)
	}
	if settling {
		return store.Workload{}, 0, errSettling
	}
	outcomes := make([]placementOutcome, 0, len(decided))
	for _, d := range decided {
		if d.machine != "" {
			c.log.Info("admit: placed", "workload", d.workload, "machine", d.machine, "driver", d.driver, "attempt", d.attempt, "epoch", epoch)
			outcomes = append(outcomes, placementOutcome{OutcomePlaced, ReasonNone})
		} else {
			c.log.Info("admit: queued", "workload", d.workload, "reason", d.reason, "epoch", epoch)
			outcomes = append(outcomes, placementOutcome{OutcomeQueued, d.code})
		}
	}
	// What it placed holds capacity on its new machine, as written, and
	// runs there; what it moved holds none on the old one, read again.
	c.backend.Placed(classes, writes.placed...)
	moved := slices.DeleteFunc(wakes, func(wk change) bool { return wk.mode == protocol.ModeRun })
	c.backend.Changed(machinesOf(refsOf(moved))...)
	tell(c.backend, moved)
	c.countPlacements(outcomes)
	return last, n, nil
}

func (c *Controller) admitOne(tx store.Tx, fleet *placement.Fleet, classes map[string]store.Class, w *store.Workload, wakes *changes, decided *[]decision, writes *admitWrites) error {
	class, ok := classes[w.Class]
	if !ok {
		return c.queue(tx, w, "its class "+w.Class+" no longer exists", ReasonClassMissing, decided, writes)
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
		return c.queue(tx, w, nofit.Reason, nofit.Code, decided, writes)
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
	// The audit trail of admits, logged once committed.
	*decided = append(*decided, decision{workload: w.ID, machine: d.Machine, driver: d.Driver, attempt: w.Attempt})
	return c.place(tx, w, d, text, wakes, writes)
}

// place records a placement: state provisioning, and a new mode
// generation once the batch's machines are bumped (write).
func (c *Controller) place(tx store.Tx, w *store.Workload, d placement.Decision, text string, wakes *changes, writes *admitWrites) error {
	w.Machine, w.Driver, w.Devices = d.Machine, d.Driver, d.Devices
	w.State, w.Reason, w.Since = store.StateProvisioning, "", c.clk.Now()
	wakes.add(protocol.ModeRun, w.ID, d.Machine)
	writes.placed = append(writes.placed, *w)
	return timeline(tx, c.clk.Now(), w.ID, text)
}

// admitWrites are an admit batch's writes, gathered as it decides and
// made together at its end (write): each machine placed on is bumped
// once for all its placements, and the workloads are written several a
// statement. One placement was two statements, and a burst's thousands
// of them queued under the store's one writer (issue 13).
type admitWrites struct {
	// placed are the workloads placed, in the order they were.
	placed []store.Workload
	// queued are the workloads left waiting with a new reason.
	queued []store.Workload
}

// write makes the batch's writes in tx. Each machine placed on comes back
// from its bump as the transaction reads it, and the view must have had
// it right (Confirm), or nothing commits. A machine's placements take its
// new generations in the order they were made, as a bump each would give.
func (c *Controller) write(tx store.Tx, writes *admitWrites) error {
	var bumps []store.Bump
	count := make(map[string]int64)
	for _, w := range writes.placed {
		if count[w.Machine] == 0 {
			bumps = append(bumps, store.Bump{Machine: w.Machine})
		}
		count[w.Machine]++
	}
	for i := range bumps {
		bumps[i].By = count[bumps[i].Machine]
	}
	read, err := tx.BumpMachines(bumps)
	if err != nil {
		return err
	}
	byID := make(map[string]*store.Machine, len(read))
	for i := range read {
		byID[read[i].ID] = &read[i]
	}
	next := make(map[string]int64, len(bumps))
	for _, b := range bumps {
		m := byID[b.Machine]
		if err := c.backend.Confirm(b.Machine, m); err != nil {
			return err
		}
		next[b.Machine] = m.Generation - b.By + 1
	}
	for i := range writes.placed {
		w := &writes.placed[i]
		w.ModeGeneration = next[w.Machine]
		next[w.Machine]++
	}
	return tx.PutWorkloads(slices.Concat(writes.queued, writes.placed))
}

// queue leaves w waiting with reason, writing the timeline only when the
// reason changed, so a workload waiting for hours has one line, not
// thousands.
func (c *Controller) queue(tx store.Tx, w *store.Workload, reason, code string, decided *[]decision, writes *admitWrites) error {
	if w.State == store.StateQueued && w.Reason == reason {
		return nil
	}
	w.State, w.Reason, w.Since = store.StateQueued, reason, c.clk.Now()
	*decided = append(*decided, decision{workload: w.ID, reason: reason, code: code})
	writes.queued = append(writes.queued, *w)
	return timeline(tx, c.clk.Now(), w.ID, "queued: "+reason)
}
