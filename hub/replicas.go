package hub

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// replicaWaker is implemented by stores that carry wake-ups between hub
// replicas (PostgreSQL's LISTEN/NOTIFY). A change committed on one replica
// must reach the replica holding the machine's long poll, and a report
// recorded on one must reach the region's controller, wherever it runs:
// the store's notification channel carries both, with no presence table.
type replicaWaker interface {
	Notify(ctx context.Context, payload string) error
	Listen(ctx context.Context, wake func(payload string)) error
}

// observePrefix marks a notification for the controller: a machine's
// report changed. admitPayload and capacityPayload wake the controller: a
// workload waits, or capacity may have grown; capacityPayload may be
// followed by the ID of the machine whose record or holdings changed, for
// the leader's capacity view. Any other payload is a machine to wake,
// whose desired state (so what it holds) changed.
const (
	observePrefix   = "observe:"
	admitPayload    = "admit:"
	capacityPayload = "capacity:"
)

// wakeLeader wakes the region's controller, here and on whichever replica
// leads, after an admin change: without it a change made on a standby
// would wait for the leader's ControllerInterval. capacity says the
// change may have freed or added capacity; machines are those whose
// record or holdings it changed, which the leader's capacity view reads
// again.
func (h *Hub) wakeLeader(ctx context.Context, capacity bool, machines ...string) {
	if !capacity {
		h.wakeControllers()
		h.notifyReplicas(ctx, admitPayload)
		return
	}
	h.machinesChanged(machines...)
	h.capacityChanged()
	if len(machines) == 0 {
		h.notifyReplicas(ctx, capacityPayload)
	}
	for _, id := range slices.Compact(slices.Sorted(slices.Values(machines))) {
		h.notifyReplicas(ctx, capacityPayload+id)
	}
}

// notifyReplicas tells the other replicas, when the store has any.
func (h *Hub) notifyReplicas(ctx context.Context, payload string) {
	rw, ok := h.store.(replicaWaker)
	if !ok {
		return
	}
	// The caller's commit stands whatever happens here; a lost
	// notification costs at most one poll timeout of latency.
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := rw.Notify(nctx, payload); err != nil {
		h.log.Warn("cannot notify the other hub replicas; they learn of it at their next poll", "err", err)
	}
}

// listenReplicas delivers the other replicas' notifications until ctx is
// done. What it starts, it starts in wg, so its owner waits for it.
func (h *Hub) listenReplicas(ctx context.Context, wg *sync.WaitGroup) {
	rw, ok := h.store.(replicaWaker)
	if !ok {
		return
	}
	err := rw.Listen(ctx, func(payload string) {
		switch {
		case payload == "":
			// Notifications may have been missed: wake everything,
			// observe everything.
			h.polls.wakeEvery()
			// Off the listener's goroutine: it reads the store.
			h.forgetViews()
			wg.Go(func() {
				h.markAllDirty(ctx)
				h.wakeControllers()
			})
		case payload == admitPayload:
			h.wakeControllers()
		case strings.HasPrefix(payload, capacityPayload):
			if id := strings.TrimPrefix(payload, capacityPayload); id != "" {
				h.machinesChanged(id)
			}
			h.capacityChanged()
		case strings.HasPrefix(payload, observePrefix):
			h.markDirty(strings.TrimPrefix(payload, observePrefix))
		default:
			// The other replica's commit time is not known here, so
			// this wake-up is left out of wake latency.
			h.polls.wake(payload, time.Time{})
			h.machinesChanged(payload)
		}
	})
	if err != nil && ctx.Err() == nil {
		h.log.Error("cannot listen for the other hub replicas' notifications", "err", err)
	}
}
