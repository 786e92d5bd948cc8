package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"einsora.dev/edge/hub/store"
)

// ErrNotLeader is returned by controller writes made without the region's
// lease, or under an epoch that has moved on: a paused old leader can never
// write.
var ErrNotLeader = errors.New("not the region's leader")

// leadership is this hub's hold on the lease controller:<region>.
type leadership struct {
	// mu guards the following fields.
	mu      sync.Mutex
	epoch   int64 // 0 while not leading
	changed chan struct{}
}

// Leadership reports whether this controller leads its region now, and a
// channel closed at the next change.
func (c *Controller) Leadership() (leading bool, changed <-chan struct{}) {
	c.lead.mu.Lock()
	defer c.lead.mu.Unlock()
	return c.lead.epoch != 0, c.lead.changed
}

func (c *Controller) leaseName() string { return "controller:" + c.cfg.Region }

func (c *Controller) leaderEpoch() int64 {
	c.lead.mu.Lock()
	defer c.lead.mu.Unlock()
	return c.lead.epoch
}

func (c *Controller) setEpoch(epoch int64) {
	c.lead.mu.Lock()
	defer c.lead.mu.Unlock()
	if c.lead.epoch == epoch {
		return
	}
	c.lead.epoch = epoch
	close(c.lead.changed)
	c.lead.changed = make(chan struct{})
}

// lease takes or renews the region's lease. It returns whether this hub
// leads. A hub that cannot renew steps down at once: it stops admitting and
// its in-process agent stops, and another hub takes over after the lease
// expires.
func (c *Controller) lease(ctx context.Context) bool {
	was := c.leaderEpoch()
	var epoch int64
	err := c.store.Update(ctx, func(tx store.Tx) error {
		epoch = 0
		now := c.clk.Now()
		l, err := tx.Lease(c.leaseName())
		switch {
		case errors.Is(err, store.ErrNotFound):
			l = store.Lease{Name: c.leaseName()}
		case err != nil:
			return err
		case l.Holder != c.cfg.HolderID && now.Before(l.Expires):
			return nil // another hub leads
		}
		// Renewing keeps the epoch; any new term, ours or after another
		// holder, gets the next one, so writes of an older term fail.
		if was == 0 || l.Holder != c.cfg.HolderID || l.Epoch != was {
			l.Epoch++
		}
		l.Holder, l.Expires = c.cfg.HolderID, now.Add(c.cfg.LeaseTTL)
		epoch = l.Epoch
		return tx.PutLease(l)
	})
	if err != nil && ctx.Err() != nil {
		// Stopping: release gives the lease up, under the epoch held.
		return was != 0
	}
	if err != nil {
		c.log.Error("cannot take or renew the region's lease; stepping down", "lease", c.leaseName(), "err", err)
		epoch = 0
	}
	switch {
	case was != epoch && epoch != 0:
		c.log.Info("leading the region", "lease", c.leaseName(), "epoch", epoch)
		// A new term examines everything that waits once, and reads the
		// capacity whole: another leader may have placed meanwhile.
		c.backend.Forget()
		c.capacityChanged()
	case was != 0 && epoch == 0:
		c.backend.Forget()
		c.log.Warn("stepped down: no longer leading the region", "lease", c.leaseName(), "epoch", was)
	}
	c.setEpoch(epoch)
	return epoch != 0
}

// fence refuses a controller write unless this hub holds the region's lease
// under the epoch it believes, checked in the write's own transaction.
func (c *Controller) fence(tx store.Tx) error {
	_, err := c.fenced(tx)
	return err
}

// fenced is fence, returning the epoch the write is made under.
func (c *Controller) fenced(tx store.Tx) (int64, error) {
	epoch := c.leaderEpoch()
	if epoch == 0 {
		return 0, ErrNotLeader
	}
	l, err := tx.Lease(c.leaseName())
	if err != nil {
		return 0, fmt.Errorf("fence: %w", err)
	}
	if l.Holder != c.cfg.HolderID || l.Epoch != epoch || !c.clk.Now().Before(l.Expires) {
		return 0, fmt.Errorf("%w: lease %s is at epoch %d held by %s", ErrNotLeader, l.Name, l.Epoch, l.Holder)
	}
	return epoch, nil
}

// release gives the lease up on a clean stop, so a standby (or this hub,
// restarted) takes over at once instead of waiting out the lease.
func (c *Controller) release(ctx context.Context) {
	epoch := c.leaderEpoch()
	if epoch == 0 {
		return
	}
	c.setEpoch(0)
	// Bounded: a hub cut off from its store still stops; the lease then
	// expires on its own.
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/3)
	defer cancel()
	err := c.store.Update(ctx, func(tx store.Tx) error {
		l, err := tx.Lease(c.leaseName())
		if err != nil || l.Holder != c.cfg.HolderID || l.Epoch != epoch {
			return err
		}
		l.Expires = c.clk.Now()
		return tx.PutLease(l)
	})
	if err != nil {
		c.log.Warn("cannot give up the region's lease; a standby takes over when it expires", "err", err)
		return
	}
	c.log.Info("gave up the region's lease", "lease", c.leaseName(), "epoch", epoch)
}
