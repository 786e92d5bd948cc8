package hub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"einsora.dev/edge/hub/store"
)

// ErrNotReady: this replica cannot serve now; a load balancer should send
// agents to another.
var ErrNotReady = errors.New("not ready")

// Ready reports whether this replica can serve: its store answers within
// 2 s and its last presence batch did not fail. A load balancer's health
// check (/readyz) asks it, so a replica cut off from the store gets no new
// agents.
func (h *Hub) Ready(ctx context.Context) error {
	if h.feed.failingNow() {
		return fmt.Errorf("%w: this replica's presence batch fails to reach the store", ErrNotReady)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := h.store.View(ctx, func(tx store.Tx) error {
		_, err := tx.Lease(h.ctl.leaseName())
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%w: the store does not answer: %w", ErrNotReady, err)
	}
	return nil
}
