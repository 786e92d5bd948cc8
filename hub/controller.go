package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
)

// Controller is a region's controller: while it holds the region's lease
// (lease.go), it observes what machines report (observe.go), admits what
// waits once the fleet has settled (admit.go), and fails what is stuck
// (sweep.go). It owns its lease, its passes and the set of machines whose
// reports it has yet to observe; the Hub composes it and feeds it news.
type Controller struct {
	store    store.Store
	clk      clock.Clock
	log      *slog.Logger
	cfg      Config
	presence presence
	// backend is the runtime the controller places on: it offers
	// capacity, reports what it observed, and is told what changed.
	backend Backend

	// kick wakes the controller; dirty holds the machines whose reports
	// it has not yet observed.
	kick    chan struct{}
	dirtyMu sync.Mutex
	dirty   map[string]bool

	// started is when this hub process started.
	started time.Time
	// silent is set while every machine is silent, so it is logged once.
	// Only the controller's passes touch it.
	silent bool
	// blind is set while machines look gone but presence is blind
	// (presence.go), so it is logged once.
	blind bool

	lead leadership

	// retained is when retain (retention.go) last ran; retiredLines and
	// trimmedLines count the lines it deleted.
	retained                   time.Time
	retiredLines, trimmedLines atomic.Int64
	// capGen counts the changes that may have grown capacity; admission
	// examines queued workloads again only when it moved.
	capGen atomic.Uint64
	// admitMu makes admission, and the capacity view it reads, one at a
	// time: the view is right only if each batch sees the changes of the
	// batches before it (passes are one at a time already; tests call
	// admit concurrently).
	admitMu   sync.Mutex
	admission admission
	// swept is when sweep last ran, viewChecked when the capacity view
	// was last checked against a full read. Only the passes touch them.
	swept, viewChecked time.Time
	// warmed is when warm last read ahead. Only the passes touch it.
	warmed time.Time
}

// newController returns the controller of cfg.Region; cfg has its
// defaults already.
func newController(cfg Config, log *slog.Logger, started time.Time, p presence, b Backend) *Controller {
	return &Controller{
		store: cfg.Store, clk: cfg.Clock, log: log, cfg: cfg, presence: p, backend: b,
		kick:    make(chan struct{}, 1),
		dirty:   make(map[string]bool),
		started: started,
		lead:    leadership{changed: make(chan struct{})},
	}
}

// Run runs the region's controller until ctx is done: while it holds the
// lease controller:<region>, it observes what agents report, admits
// workloads, and fails what is stuck, whenever a sync or an admin change
// wakes it and at least every ControllerInterval; otherwise it stands by,
// trying for the lease.
func (c *Controller) Run(ctx context.Context) error {
	c.markAllDirty(ctx)
	var wg sync.WaitGroup
	lctx, stop := context.WithCancel(ctx)
	defer c.release(context.WithoutCancel(ctx))
	defer wg.Wait()
	defer stop()
	// The lease is renewed on its own schedule, whatever the passes are
	// doing: a long pass never costs the lease.
	wg.Go(func() { c.keepLease(lctx) })
	t := c.clk.NewTimer(c.cfg.ControllerInterval)
	defer t.Stop()
	// The first pass and a new term's sweep at once; others when
	// sweepEvery has passed (passFor).
	c.swept = time.Time{}
	for {
		leading, changed := c.Leadership()
		if leading {
			if err := c.passFor(ctx, false); err != nil && ctx.Err() == nil {
				c.log.Error("controller pass failed", "err", err)
				if errors.Is(err, ErrNotLeader) {
					c.setEpoch(0)
					c.log.Warn("stepped down: a controller write was refused", "lease", c.leaseName())
				}
			}
		}
		t.Reset(c.cfg.ControllerInterval)
		select {
		case <-ctx.Done():
			return nil
		case <-c.kick:
		case <-changed:
			c.swept = time.Time{}
		case <-t.C():
		}
	}
}

// keepLease takes or renews the region's lease until ctx is done: at a
// third of its life while leading, so two renewals can fail before it
// lapses, and as often while standing by.
func (c *Controller) keepLease(ctx context.Context) {
	t := c.clk.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if c.lease(ctx) {
			t.Reset(c.cfg.LeaseTTL / 3)
		} else {
			t.Reset(min(c.cfg.ControllerInterval, c.cfg.LeaseTTL/3))
		}
	}
}

// Pass takes or renews the region's lease and, if it leads, runs one
// pass.
func (c *Controller) Pass(ctx context.Context) error {
	if !c.lease(ctx) {
		return ErrNotLeader
	}
	return c.pass(ctx)
}

// pass is an explicit pass: it sweeps.
func (c *Controller) pass(ctx context.Context) error { return c.passFor(ctx, true) }

// passFor observes what machines reported and admits what waits, which is
// what a change wakes it for. Sweeping and checking the capacity view are
// time-driven, since each reads the whole region: a pass sweeps when told
// to (an explicit Pass) or sweepEvery has passed since the last sweep
// (the loop clears it for its first pass and a new term), not on every
// change; it checks the view when viewCheckEvery has passed.
func (c *Controller) passFor(ctx context.Context, sweep bool) error {
	now := c.clk.Now()
	defer c.timePass(now)
	errs := []error{c.observe(ctx), c.admit(ctx)}
	if now.Sub(c.viewChecked) >= c.viewCheckEvery() {
		_, err := c.checkCapacity(ctx)
		errs = append(errs, err)
	} else if now.Sub(c.warmed) >= c.cfg.ControllerInterval {
		errs = append(errs, c.warm(ctx))
	}
	if sweep || c.sweepDue() {
		c.swept = now
		errs = append(errs, c.sweep(ctx))
	}
	return errors.Join(errs...)
}

// sweepEvery is how often the loop sweeps: the spans it enforces are
// minutes long (10 minutes offline, 15 provisioning), so a sweep every 2 s
// (ControllerInterval) read the region's last syncs for precision nobody
// needs, and was the largest share of an idle hub's CPU. A sweep comes at
// most 1/40 of the offline failure span and 1/60 of the provisioning
// timeout late (15 s at the defaults), and never later than a presence
// batch interval.
func (c *Controller) sweepEvery() time.Duration {
	return max(c.cfg.ControllerInterval, min(PresenceEvery(c.cfg.OfflineAfter), c.cfg.OfflineFailAfter/40, c.cfg.ProvisioningTimeout/60))
}

// sweepDue reports whether sweepEvery has passed since the last sweep.
func (c *Controller) sweepDue() bool { return c.clk.Now().Sub(c.swept) >= c.sweepEvery() }

// viewCheckEvery is how often the capacity view is checked against a full
// read: a safety net for a change the view missed, which a full read of
// every machine's record and placed workloads finds. It no longer
// refreshes the last syncs (the sweep does, every sweepEvery), so it
// comes every 8 presence batches (2 minutes by default): at every batch
// it was a fifth of an idle hub's CPU.
func (c *Controller) viewCheckEvery() time.Duration { return 8 * PresenceEvery(c.cfg.OfflineAfter) }

// warm reads what admission would read first, when the backend is behind
// (settling, or machines changed with nothing placed since), in a read
// transaction of its own: at most once a ControllerInterval, so a fleet
// connecting costs a read of what changed every 2 s rather than at every
// pass. Without it the first change after a quiet spell paid for the
// region: about a second at 10,000 machines (issue 13).
func (c *Controller) warm(ctx context.Context) error {
	c.admitMu.Lock()
	defer c.admitMu.Unlock()
	if !c.backend.Behind() {
		return nil
	}
	c.warmed = c.clk.Now()
	c.backend.Prepare()
	err := c.store.View(ctx, func(tx store.Tx) error {
		classes, err := classMap(tx)
		if err != nil {
			return err
		}
		return c.backend.Warm(tx, classes)
	})
	if err != nil {
		return fmt.Errorf("read the capacity view ahead: %w", err)
	}
	return nil
}

// checkCapacity reads the region's capacity whole and compares it with
// the view admission keeps up to date per change (capview.go). The two
// must agree: a difference is a change the view missed, logged as an
// error naming the machine, counted, and mended by adopting the full read.
// It returns what differed.
func (c *Controller) checkCapacity(ctx context.Context) ([]viewDiff, error) {
	c.admitMu.Lock()
	defer c.admitMu.Unlock()
	c.viewChecked = c.clk.Now()
	c.backend.Prepare()
	var diffs []viewDiff
	err := c.store.View(ctx, func(tx store.Tx) error {
		classes, err := classMap(tx)
		if err != nil {
			return err
		}
		diffs, err = c.backend.Check(tx, classes)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("check the capacity view: %w", err)
	}
	for _, d := range diffs {
		c.log.Error("the capacity view missed a change; adopting the store's", "machine", d.Machine, "differed", d.What)
	}
	if len(diffs) > 0 {
		// What it missed may be capacity that grew.
		c.capacityChanged()
	}
	return diffs, nil
}

func (c *Controller) wakeController() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Controller) markDirty(machineIDs ...string) {
	c.dirtyMu.Lock()
	for _, id := range machineIDs {
		c.dirty[id] = true
	}
	c.dirtyMu.Unlock()
	c.wakeController()
}

func (c *Controller) markAllDirty(ctx context.Context) {
	var ms []store.Machine
	if err := c.store.View(ctx, func(tx store.Tx) (err error) { ms, err = tx.Machines(); return err }); err != nil {
		c.log.Error("list machines", "err", err)
		return
	}
	c.dirtyMu.Lock()
	defer c.dirtyMu.Unlock()
	for _, m := range ms {
		c.dirty[m.ID] = true
	}
}

func (c *Controller) takeDirty() []string {
	c.dirtyMu.Lock()
	defer c.dirtyMu.Unlock()
	ids := make([]string, 0, len(c.dirty))
	for id := range c.dirty {
		ids = append(ids, id)
	}
	clear(c.dirty)
	return ids
}
