package hub

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// MinHoldFraction is the shortest hold of a long poll, as a fraction of
// the poll timeout. Each poll's hold is drawn uniformly from
// [MinHoldFraction, 1] × PollTimeout, so a fleet that polled in one burst
// (after a restart) drifts apart by up to a quarter of the hold each round
// and never polls in step again. The cost is polls a quarter of the hold
// shorter at worst, 1/7 more polls on average (docs/performance.md).
const MinHoldFraction = 0.75

// holdFor draws one poll's hold from [MinHoldFraction, 1] × timeout.
// draw returns a uniform number in [0, 1); nil means math/rand/v2.
func holdFor(timeout time.Duration, draw func() float64) time.Duration {
	if draw == nil {
		draw = rand.Float64
	}
	u := min(max(draw(), 0), 1)
	return time.Duration(float64(timeout) * (MinHoldFraction + (1-MinHoldFraction)*u))
}

// polls holds the waiting long polls: one per machine, with its wake
// channel. Waking closes the channel. A new poll of a machine replaces the
// one waiting, which is answered with ErrSuperseded.
type polls struct {
	// held counts the polls holding now, past their work: load shedding
	// leaves them out.
	held atomic.Int64
	// mu guards the following fields.
	mu      sync.Mutex
	waiting map[string]*poll
}

type poll struct {
	wake chan struct{}
	// superseded is set, under polls.mu, when a newer poll replaced this one.
	superseded bool
	// committed is when the change that woke it was committed, set
	// under polls.mu; zero when woken for no one change (wakeEvery).
	committed time.Time
}

// wait registers a poll of machineID, replacing the one waiting, and
// returns it with a release func to call when the poll stops waiting.
func (p *polls) wait(machineID string) (*poll, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.waiting[machineID]; old != nil {
		old.superseded = true
		close(old.wake)
	}
	w := &poll{wake: make(chan struct{})}
	p.waiting[machineID] = w
	return w, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.waiting[machineID] == w {
			delete(p.waiting, machineID)
		}
	}
}

func (p *polls) isSuperseded(w *poll) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return w.superseded
}

// committedAt is when the change that woke w was committed.
func (p *polls) committedAt(w *poll) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return w.committed
}

// wake answers the poll waiting for machineID, for a change committed at
// committed.
func (p *polls) wake(machineID string, committed time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.waiting[machineID]; w != nil {
		w.committed = committed
		close(w.wake)
		delete(p.waiting, machineID)
	}
}

// wakeEvery answers every waiting poll: after a replica's notifications
// may have been missed, each agent fetches its desired state again.
func (p *polls) wakeEvery() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, w := range p.waiting {
		close(w.wake)
		delete(p.waiting, id)
	}
}

// connected reports whether a poll of machineID is waiting now.
func (p *polls) connected(machineID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting[machineID] != nil
}

// ids returns the machines whose polls wait now.
func (p *polls) ids() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Keys(p.waiting))
}

// Wake answers machineID's waiting long poll at once, so its agent fetches
// its desired state. It is all that Backend.Run, Park and Delete do.
func (h *Hub) Wake(machineID string) { h.polls.wake(machineID, h.clk.Now()) }

// WaitingPolls is how many long polls are holding now, their work done.
// Load shedding counts requests in flight less these, which cost nothing
// while they wait.
func (h *Hub) WaitingPolls() int { return int(h.polls.held.Load()) }

// wakeAll wakes the machines' long polls, here and, through the store, on
// every other replica. Call it after the commit that changed them.
func (h *Hub) wakeAll(ids []string) {
	// A change to a machine's desired state may change what it holds.
	h.machinesChanged(ids...)
	for _, id := range slices.Compact(slices.Sorted(slices.Values(ids))) {
		h.Wake(id)
		h.notifyReplicas(context.Background(), id)
	}
}
