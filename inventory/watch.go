package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/protocol"
)

// Watch probes at once, then every interval (none when every <= 0) and
// whenever hup delivers a signal (nil: never). It calls changed with the
// first inventory and after that only with one that differs from the last
// it was called with: a GPU that appears, a cgroup limit that changes,
// Docker that starts. It returns when ctx is done; changed is called from
// Watch's goroutine.
func (p *Prober) Watch(ctx context.Context, every time.Duration, hup <-chan os.Signal, changed func(protocol.Inventory)) {
	last := p.Probe(ctx)
	if ctx.Err() != nil {
		return
	}
	changed(last)

	var timer clock.Timer
	var tick <-chan time.Time
	if every > 0 {
		timer = p.clock.NewTimer(every)
		defer timer.Stop()
		tick = timer.C()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			timer.Reset(every)
		case sig := <-hup:
			p.log.Debug("inventory re-probe on signal", "signal", sig)
		}
		inv := p.Probe(ctx)
		if ctx.Err() != nil {
			// A probe cut short says less than the machine has.
			return
		}
		if !sameInventory(inv, last) {
			last = inv
			changed(inv)
		}
	}
}

// sameInventory compares two canonical inventories (as Probe returns
// them) by their wire form, so that what the hub would see decides.
func sameInventory(a, b protocol.Inventory) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}
