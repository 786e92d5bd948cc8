package agent

import (
	"context"
	"sync"
	"time"

	"einsora.dev/edge/drivers"
)

// changeNotifier is a driver that says when its runtime changed (the
// Docker driver, from the engine's event stream), so the apply loop looks
// at once instead of polling for exits.
type changeNotifier interface {
	Changes() <-chan struct{}
}

// NotifiedApplyInterval is the apply loop's periodic pass when every driver
// notifies its changes: only a safety net then, for a change whose event was
// lost, so it can be slow and an idle agent costs less.
const NotifiedApplyInterval = 30 * time.Second

// defaultApplyInterval is the periodic pass for h's drivers: the slow
// safety net when all of them notify, else the polling default.
func defaultApplyInterval(h *drivers.Host) time.Duration {
	all := h.All()
	for _, d := range all {
		if _, ok := d.(changeNotifier); !ok {
			return DefaultApplyInterval
		}
	}
	if len(all) == 0 {
		return DefaultApplyInterval
	}
	return NotifiedApplyInterval
}

// wakeOnChanges wakes the apply loop on every driver's change notice until
// ctx is done.
func (a *Agent) wakeOnChanges(ctx context.Context) {
	var wg sync.WaitGroup
	for _, d := range a.cfg.Drivers.All() {
		n, ok := d.(changeNotifier)
		if !ok {
			continue
		}
		ch := n.Changes()
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-ch:
					select {
					case a.wakeApply <- struct{}{}:
					default:
					}
				}
			}
		})
	}
	wg.Wait()
}
