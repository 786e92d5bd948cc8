package hub

import (
	"context"
	"errors"
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

	lead leadership

	// retained is when retain (retention.go) last ran; retiredLines and
	// trimmedLines count the lines it deleted.
	retained                   time.Time
	retiredLines, trimmedLines atomic.Int64
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
	t := c.clk.NewTimer(0)
	defer t.Stop()
	defer c.release(context.WithoutCancel(ctx))
	renewed := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.kick:
		case <-t.C():
		}
		// Renew at a third of the lease's life, so two renewals can fail
		// before it lapses.
		if c.clk.Now().Sub(renewed) >= c.cfg.LeaseTTL/3 || c.leaderEpoch() == 0 {
			if c.lease(ctx) {
				renewed = c.clk.Now()
			}
		}
		if c.leaderEpoch() != 0 {
			if err := c.pass(ctx); err != nil && ctx.Err() == nil {
				c.log.Error("controller pass failed", "err", err)
				if errors.Is(err, ErrNotLeader) {
					c.setEpoch(0)
					c.log.Warn("stepped down: a controller write was refused", "lease", c.leaseName())
				}
			}
		}
		t.Reset(min(c.cfg.ControllerInterval, c.cfg.LeaseTTL/3))
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

func (c *Controller) pass(ctx context.Context) error {
	defer c.timePass(c.clk.Now())
	return errors.Join(c.observe(ctx), c.admit(ctx), c.sweep(ctx))
}

func (c *Controller) wakeController() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Controller) markDirty(machineID string) {
	c.dirtyMu.Lock()
	c.dirty[machineID] = true
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
