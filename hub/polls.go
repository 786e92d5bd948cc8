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
	// onWake, set under polls.mu (parked), runs when the poll is woken,
	// under polls.mu: it must not block.
	onWake func()
	// heard is when the poll's connection last showed its peer alive;
	// nil for a poll without one (the in-process agent), always alive.
	heard func() time.Time
	// superseded is set, under polls.mu, when a newer poll replaced this one.
	superseded bool
	// committed is when the change that woke it was committed, set
	// under polls.mu; zero when woken for no one change (wakeEvery).
	committed time.Time
	// moveTo, set under polls.mu, is the replica sendAway woke it for.
	moveTo string
}

// wait registers a poll of machineID, replacing the one waiting, and
// returns it with a release func to call when the poll stops waiting.
// heard, if not nil, is when the poll's connection last showed its peer
// alive (WithSignOfLife).
func (p *polls) wait(machineID string, heard func() time.Time) (*poll, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.waiting[machineID]; old != nil {
		old.superseded = true
		old.fire()
	}
	w := &poll{wake: make(chan struct{}), heard: heard}
	p.waiting[machineID] = w
	return w, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.waiting[machineID] == w {
			delete(p.waiting, machineID)
		}
	}
}

// fire wakes w, under polls.mu: it closes w.wake, which a holding Sync
// waits on, and runs a parked poll's onWake.
func (w *poll) fire() {
	close(w.wake)
	if w.onWake != nil {
		w.onWake()
	}
}

// parked sets w's onWake, unless w was woken already: then it reports
// false, and the poll is answered as a held one would be.
func (p *polls) parked(w *poll, onWake func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-w.wake:
		return false
	default:
	}
	w.onWake = onWake
	return true
}

// wokenFor is why w was woken, read at once: a newer poll of its machine
// superseded it, or sendAway moved it to the replica at moveTo (""
// otherwise).
func (p *polls) wokenFor(w *poll) (superseded bool, moveTo string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return w.superseded, w.moveTo
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
		w.fire()
		delete(p.waiting, machineID)
	}
}

// sendAway wakes up to n of the polls waiting on a connection (never the
// in-process agent's) to move to the replica at url, and returns how many.
// Which ones is left to the map's order: no agent is picked for good.
func (p *polls) sendAway(n int, url string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	sent := 0
	for id, w := range p.waiting {
		if sent >= n {
			break
		}
		if w.heard == nil {
			continue
		}
		w.moveTo = url
		w.fire()
		delete(p.waiting, id)
		sent++
	}
	return sent
}

// wakeEvery answers every waiting poll: after a replica's notifications
// may have been missed, each agent fetches its desired state again.
func (p *polls) wakeEvery() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, w := range p.waiting {
		w.fire()
		delete(p.waiting, id)
	}
}

// connected reports whether a poll of machineID is waiting now.
func (p *polls) connected(machineID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting[machineID] != nil
}

// heardAt is, when a poll of machineID waits, when its connection last
// showed the machine alive; now for a poll without a connection.
func (p *polls) heardAt(machineID string, now time.Time) (time.Time, bool) {
	p.mu.Lock()
	w := p.waiting[machineID]
	p.mu.Unlock()
	if w == nil {
		return time.Time{}, false
	}
	return w.signOfLife(now), true
}

func (w *poll) signOfLife(now time.Time) time.Time {
	if w.heard == nil {
		return now
	}
	return w.heard()
}

// heardAll is heardAt for every poll waiting now.
func (p *polls) heardAll(now time.Time) map[string]time.Time {
	p.mu.Lock()
	waiting := maps.Clone(p.waiting)
	p.mu.Unlock()
	out := make(map[string]time.Time, len(waiting))
	for id, w := range waiting {
		out[id] = w.signOfLife(now)
	}
	return out
}

// signOfLifeKey carries a sync's WithSignOfLife.
type signOfLifeKey struct{}

// WithSignOfLife returns ctx carrying heard: when the connection of the
// sync in ctx last showed its peer alive (a byte read, or the kernel's
// keepalive answered). A poll held on that connection counts as contact
// with its machine only as of then (rule 8), so a host that vanishes
// during a long hold still goes offline 45 s after its last sign of life.
func WithSignOfLife(ctx context.Context, heard func() time.Time) context.Context {
	return context.WithValue(ctx, signOfLifeKey{}, heard)
}

func signOfLifeOf(ctx context.Context) func() time.Time {
	f, _ := ctx.Value(signOfLifeKey{}).(func() time.Time)
	return f
}

// Wake answers machineID's waiting long poll at once, so its agent fetches
// its desired state. It is all that Backend.Run, Park and Delete do.
func (h *Hub) Wake(machineID string) { h.polls.wake(machineID, h.clk.Now()) }

// WaitingPolls is how many long polls are holding now, their work done.
// The reconnect window counts them (a held poll gives its request slot
// back: OnHeld).
func (h *Hub) WaitingPolls() int { return int(h.polls.held.Load()) }

// wakeAll wakes the machines' long polls, here and, through the store, on
// every other replica. Call it after the commit that changed them.
func (h *Hub) wakeAll(ids []string) {
	// A change to a machine's desired state may change what it holds.
	h.machinesChanged(ids...)
	h.wakePolls(ids)
}

// wakePolls wakes the machines' long polls, here and on every other
// replica, and tells no capacity view: for a change the view took itself
// (admission's placements, capView.placed).
func (h *Hub) wakePolls(ids []string) {
	for _, id := range slices.Compact(slices.Sorted(slices.Values(ids))) {
		h.Wake(id)
		h.notifyReplicas(context.Background(), id)
	}
}
