package hub

import (
	"context"
	"time"

	"einsora.dev/edge/hub/store"
)

// retainEvery spaces the retention passes: deleting old timelines is
// housekeeping, not something a controller pass should pay for each time.
const retainEvery = time.Hour

// retain deletes the timelines of workloads removed more than
// TimelineRetention ago (their last line is their removal). Only the
// region's leader runs it, fenced like every controller write, and at most
// once every retainEvery.
func (c *Controller) retain(ctx context.Context) error {
	now := c.clk.Now()
	if !c.retained.IsZero() && now.Sub(c.retained) < retainEvery {
		return nil
	}
	var n int
	err := c.store.Update(ctx, func(tx store.Tx) (err error) {
		if err := c.fence(tx); err != nil {
			return err
		}
		n, err = tx.DeleteRemovedTimelines(now.Add(-c.cfg.TimelineRetention))
		return err
	})
	if err != nil {
		return err
	}
	c.retained = now
	if n > 0 {
		c.retiredLines.Add(int64(n))
		c.log.Info("deleted the timelines of removed workloads", "lines", n, "older_than", c.cfg.TimelineRetention)
	}
	return nil
}
