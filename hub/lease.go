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

// Leadership reports whether this hub leads its region now, and a channel
// closed at the next change.
func (h *Hub) Leadership() (leading bool, changed <-chan struct{}) {
	h.lead.mu.Lock()
	defer h.lead.mu.Unlock()
	return h.lead.epoch != 0, h.lead.changed
}

func (h *Hub) leaseName() string { return "controller:" + h.cfg.Region }

func (h *Hub) leaderEpoch() int64 {
	h.lead.mu.Lock()
	defer h.lead.mu.Unlock()
	return h.lead.epoch
}

func (h *Hub) setEpoch(epoch int64) {
	h.lead.mu.Lock()
	defer h.lead.mu.Unlock()
	if h.lead.epoch == epoch {
		return
	}
	h.lead.epoch = epoch
	close(h.lead.changed)
	h.lead.changed = make(chan struct{})
}

// lease takes or renews the region's lease. It returns whether this hub
// leads. A hub that cannot renew steps down at once: it stops admitting and
// its in-process agent stops, and another hub takes over after the lease
// expires.
func (h *Hub) lease(ctx context.Context) bool {
	was := h.leaderEpoch()
	var epoch int64
	err := h.store.Update(ctx, func(tx store.Tx) error {
		epoch = 0
		now := h.clk.Now()
		l, err := tx.Lease(h.leaseName())
		switch {
		case errors.Is(err, store.ErrNotFound):
			l = store.Lease{Name: h.leaseName()}
		case err != nil:
			return err
		case l.Holder != h.cfg.HolderID && now.Before(l.Expires):
			return nil // another hub leads
		}
		// Renewing keeps the epoch; any new term, ours or after another
		// holder, gets the next one, so writes of an older term fail.
		if was == 0 || l.Holder != h.cfg.HolderID || l.Epoch != was {
			l.Epoch++
		}
		l.Holder, l.Expires = h.cfg.HolderID, now.Add(h.cfg.LeaseTTL)
		epoch = l.Epoch
		return tx.PutLease(l)
	})
	if err != nil {
		if ctx.Err() == nil {
			h.log.Error("cannot take or renew the region's lease; stepping down", "lease", h.leaseName(), "err", err)
		}
		epoch = 0
	}
	switch {
	case was == 0 && epoch != 0:
		h.log.Info("leading the region", "lease", h.leaseName(), "epoch", epoch)
	case was != 0 && epoch != was:
		h.log.Warn("stepped down: no longer leading the region", "lease", h.leaseName(), "epoch", was)
	}
	h.setEpoch(epoch)
	return epoch != 0
}

// fence refuses a controller write unless this hub holds the region's lease
// under the epoch it believes, checked in the write's own transaction.
func (h *Hub) fence(tx store.Tx) error {
	epoch := h.leaderEpoch()
	if epoch == 0 {
		return ErrNotLeader
	}
	l, err := tx.Lease(h.leaseName())
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if l.Holder != h.cfg.HolderID || l.Epoch != epoch || !h.clk.Now().Before(l.Expires) {
		return fmt.Errorf("%w: lease %s is at epoch %d held by %s", ErrNotLeader, l.Name, l.Epoch, l.Holder)
	}
	return nil
}

// release gives the lease up on a clean stop, so a standby (or this hub,
// restarted) takes over at once instead of waiting out the lease.
func (h *Hub) release(ctx context.Context) {
	epoch := h.leaderEpoch()
	if epoch == 0 {
		return
	}
	h.setEpoch(0)
	err := h.store.Update(ctx, func(tx store.Tx) error {
		l, err := tx.Lease(h.leaseName())
		if err != nil || l.Holder != h.cfg.HolderID || l.Epoch != epoch {
			return err
		}
		l.Expires = h.clk.Now()
		return tx.PutLease(l)
	})
	if err != nil {
		h.log.Warn("cannot give up the region's lease; a standby takes over when it expires", "err", err)
		return
	}
	h.log.Info("gave up the region's lease", "lease", h.leaseName(), "epoch", epoch)
}
