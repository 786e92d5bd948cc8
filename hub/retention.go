package hub

import (
	"context"
	"time"

	"einsora.dev/edge/hub/store"
)

// trimBatch bounds the timelines one retention pass trims, so that a pass
// stays one short transaction; the rest wait for the next.
const trimBatch = 1000

// retainEvery spaces the retention passes: deleting old timelines is
// housekeeping, not something a controller pass should pay for each time.
const retainEvery = time.Hour

// retain deletes the timelines of workloads removed more than
// TimelineRetention ago (their last line is their removal), and trims every
// timeline longer than TimelineMax: the report path trims the timelines it
// writes to, and this bounds those the controller and operators write to.
// Only the region's leader runs it, fenced like every controller write, and
// at most once every retainEvery.
func (c *Controller) retain(ctx context.Context) error {
	now := c.clk.Now()
	if !c.retained.IsZero() && now.Sub(c.retained) < retainEvery {
		return nil
	}
	var n, trimmed int
	err := c.store.Update(ctx, func(tx store.Tx) (err error) {
		n, trimmed = 0, 0
		if err := c.fence(tx); err != nil {
			return err
		}
		if n, err = tx.DeleteRemovedTimelines(now.Add(-c.cfg.TimelineRetention)); err != nil {
			return err
		}
		long, err := tx.LongTimelines(c.cfg.TimelineMax, trimBatch)
		if err != nil {
			return err
		}
		for _, w := range long {
			k, err := tx.TrimTimeline(w, c.cfg.TimelineMax, trimNote(c.cfg.TimelineMax))
			if err != nil {
				return err
			}
			trimmed += k
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.retained = now
	c.trimmedLines.Add(int64(trimmed))
	if n > 0 {
		c.retiredLines.Add(int64(n))
		c.log.Info("deleted the timelines of removed workloads", "lines", n, "older_than", c.cfg.TimelineRetention)
	}
	return nil
}
