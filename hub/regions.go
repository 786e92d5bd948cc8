package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"einsora.dev/edge/hub/store"
)

// AllRegions, as a region this hub may lead, stands for every region that
// has a machine or an enrolment token.
const AllRegions = "*"

// MaxRegions bounds the controllers one hub runs: regions come from
// tokens and machines, and each costs a lease renewal every few seconds.
const MaxRegions = 256

// discoverEvery is how often a hub that leads every region ("*") looks
// for new ones, at least.
const discoverEvery = 10 * time.Second

// controllers are the hub's controllers, one per region it may lead, each
// with its own lease controller:<region>, epoch and fencing, so replicas
// can split the regions between them. The first is the primary: the one
// Leadership reports.
type controllers struct {
	// mu guards the following fields.
	mu      sync.Mutex
	byName  map[string]*Controller
	order   []string
	full    bool // MaxRegions reached, logged once
	started func(*Controller)
}

func (cs *controllers) list() []*Controller {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]*Controller, len(cs.order))
	for i, r := range cs.order {
		out[i] = cs.byName[r]
	}
	return out
}

// regions lists the regions this hub runs a controller for, in the
// order they were added.
func (h *Hub) Regions() []string {
	h.ctls.mu.Lock()
	defer h.ctls.mu.Unlock()
	return slices.Clone(h.ctls.order)
}

// addRegion makes region's controller, if it has none, and starts it when
// Run is running. It returns false when MaxRegions are run already.
func (h *Hub) addRegion(region string) bool {
	h.ctls.mu.Lock()
	defer h.ctls.mu.Unlock()
	if _, ok := h.ctls.byName[region]; ok {
		return true
	}
	if len(h.ctls.order) >= MaxRegions {
		if !h.ctls.full {
			h.ctls.full = true
			h.log.Error("this hub runs as many regions as it may; the others are led by no hub here", "max", MaxRegions, "region", region)
		}
		return false
	}
	cfg := h.cfg
	cfg.Region = region
	b := &agentBackend{region: region, log: h.log, presence: h.presence, wake: h.wakeAll, wakePolls: h.wakePolls, derive: h.derivePlaced, view: newCapView(region, cfg.Drivers)}
	c := newController(cfg, h.log.With("region", region), h.started, h.presence, b)
	h.ctls.byName[region] = c
	h.ctls.order = append(h.ctls.order, region)
	if h.ctls.started != nil {
		h.ctls.started(c)
	}
	return true
}

// discoverRegions, for a hub that leads every region, adds a controller
// for each region that has a machine or an outstanding token.
func (h *Hub) discoverRegions(ctx context.Context) error {
	if !h.allRegions {
		return nil
	}
	var regions []string
	err := h.store.View(ctx, func(tx store.Tx) error {
		ms, err := tx.Machines()
		if err != nil {
			return err
		}
		for _, m := range ms {
			regions = append(regions, m.Region)
		}
		ts, err := tx.Tokens(maxTokensListed)
		if err != nil {
			return err
		}
		now := h.clk.Now()
		for _, t := range ts {
			if t.Used.IsZero() && now.Before(t.Expires) {
				regions = append(regions, t.Region)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("discover regions: %w", err)
	}
	for _, r := range slices.Compact(slices.Sorted(slices.Values(regions))) {
		if r != "" && !h.addRegion(r) {
			break
		}
	}
	return nil
}

// maxTokensListed bounds the tokens read to find regions.
const maxTokensListed = 1000

// runControllers runs every controller until ctx is done, with those
// discovered later when the hub leads every region.
func (h *Hub) runControllers(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make(chan error, MaxRegions)
	start := func(c *Controller) {
		wg.Go(func() {
			if err := c.Run(ctx); err != nil {
				errs <- fmt.Errorf("controller:%s: %w", c.cfg.Region, err)
			}
		})
	}
	h.ctls.mu.Lock()
	for _, r := range h.ctls.order {
		start(h.ctls.byName[r])
	}
	h.ctls.started = start
	h.ctls.mu.Unlock()
	defer func() {
		h.ctls.mu.Lock()
		h.ctls.started = nil
		h.ctls.mu.Unlock()
		wg.Wait()
	}()
	if !h.allRegions {
		<-ctx.Done()
		return firstErr(errs)
	}
	t := h.clk.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return firstErr(errs)
		case <-t.C():
		}
		if err := h.discoverRegions(ctx); err != nil && ctx.Err() == nil {
			h.log.Error("cannot look for regions to lead", "err", err)
		}
		t.Reset(max(h.cfg.ControllerInterval, discoverEvery))
	}
}

func firstErr(errs chan error) error {
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// passAll takes or renews each region's lease and runs a pass of those it
// leads; ErrNotLeader when it leads none.
func (h *Hub) passAll(ctx context.Context) error {
	if err := h.discoverRegions(ctx); err != nil {
		return err
	}
	var errs []error
	leads := 0
	for _, c := range h.ctls.list() {
		err := c.Pass(ctx)
		if errors.Is(err, ErrNotLeader) {
			continue
		}
		leads++
		if err != nil {
			errs = append(errs, fmt.Errorf("controller:%s: %w", c.cfg.Region, err))
		}
	}
	if leads == 0 {
		return ErrNotLeader
	}
	return errors.Join(errs...)
}

// wakeControllers wakes every controller for a pass.
func (h *Hub) wakeControllers() {
	for _, c := range h.ctls.list() {
		c.wakeController()
	}
}

// capacityChanged tells every controller that capacity may have grown, so
// what waits in its region is examined again.
func (h *Hub) capacityChanged() {
	for _, c := range h.ctls.list() {
		c.capacityChanged()
	}
}

// machinesChanged tells every controller's capacity view that these
// machines, or what is placed on them, changed (committed).
func (h *Hub) machinesChanged(ids ...string) {
	for _, c := range h.ctls.list() {
		c.backend.Changed(ids...)
	}
}

// viewMisses sums the machines the controllers' capacity views had wrong.
func (h *Hub) viewMisses() int64 {
	var n int64
	for _, c := range h.ctls.list() {
		if b, ok := c.backend.(*agentBackend); ok {
			n += b.view.diffs.Load()
		}
	}
	return n
}

// forgetViews makes every controller read its capacity whole again.
func (h *Hub) forgetViews() {
	for _, c := range h.ctls.list() {
		c.backend.Forget()
	}
}

// markDirty tells every controller that machineID reported; each
// observes only the machines of its region.
func (h *Hub) markDirty(machineID string) {
	for _, c := range h.ctls.list() {
		c.markDirty(machineID)
	}
}

func (h *Hub) markAllDirty(ctx context.Context) {
	for _, c := range h.ctls.list() {
		c.markAllDirty(ctx)
	}
}

// LeadingRegions reports, for each region this hub runs, whether it leads
// it now.
func (h *Hub) LeadingRegions() map[string]bool {
	out := map[string]bool{}
	for _, c := range h.ctls.list() {
		leading, _ := c.Leadership()
		out[c.cfg.Region] = leading
	}
	return out
}

// RegionLed reports whether some hub leads region now, or this hub will
// (it leads every region, so it takes a new one at its next look): a
// workload or token for a region no hub leads waits for ever.
func (h *Hub) RegionLed(ctx context.Context, region string) (bool, error) {
	if h.allRegions {
		return true, nil
	}
	h.ctls.mu.Lock()
	_, ours := h.ctls.byName[region]
	h.ctls.mu.Unlock()
	if ours {
		return true, nil // this hub leads it, or stands by for it
	}
	var l store.Lease
	err := h.store.View(ctx, func(tx store.Tx) (err error) { l, err = tx.Lease("controller:" + region); return err })
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return h.clk.Now().Before(l.Expires), nil
}

// UnledWarning is the one line that says region has no leader, or "".
func (h *Hub) UnledWarning(ctx context.Context, region string) string {
	led, err := h.RegionLed(ctx, region)
	if err != nil || led {
		return ""
	}
	return fmt.Sprintf("no hub leads region %s now, so nothing there is placed until one does: start a hub with --region %s (or --region '*')", region, region)
}
