package hub

import (
	"context"
	"errors"
	"sync"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/protocol"
)

// ErrParked is what Sync returns for a poll it parked (WithParking): the
// answer comes later, through Parking.Deliver.
var ErrParked = errors.New("poll parked: its answer comes through Parking.Deliver")

// Parking lets Sync park a poll it would hold: no goroutine waits on it,
// only a timer for the end of its hold, and its caller takes the poll's
// connection off the server meanwhile (docs/performance.md, "Held polls
// parked in the hub").
type Parking struct {
	// Parked is called before Sync returns ErrParked, with the poll's
	// cancel: it ends the poll unanswered (its connection is gone).
	// Parked must not call cancel itself.
	Parked func(cancel func())
	// Deliver takes the parked poll's answer, at most once, from a
	// goroutine of the hub's; not at all if cancel came first.
	Deliver func(*protocol.SyncResponse, error)
}

type parkingKey struct{}

// WithParking returns ctx asking Sync to park, through p, a poll it would
// hold.
func WithParking(ctx context.Context, p *Parking) context.Context {
	return context.WithValue(ctx, parkingKey{}, p)
}

func parkingOf(ctx context.Context) *Parking {
	p, _ := ctx.Value(parkingKey{}).(*Parking)
	return p
}

// parkedPoll is a held poll that nothing waits on: its wake (polls.fire),
// its hold's timer or its cancel ends it, once.
type parkedPoll struct {
	h          *Hub
	ctx        context.Context // what its answer needs of the sync's (detached)
	machineID  string
	hubsDigest string
	w          *poll
	gen        int64
	release    func()
	deliver    func(*protocol.SyncResponse, error)

	// mu guards the following fields.
	mu    sync.Mutex
	ended bool
	timer clock.Timer
}

// park parks the held poll w instead of waiting on it, and reports
// whether it did: false when w was woken already, for the caller to
// answer as a held poll. Once parked, the poll owns release.
func (h *Hub) park(ctx context.Context, pk *Parking, machineID, hubsDigest string, w *poll, gen int64, release func()) bool {
	p := &parkedPoll{
		h: h, ctx: detached(ctx), machineID: machineID, hubsDigest: hubsDigest,
		w: w, gen: gen, release: release, deliver: pk.Deliver,
	}
	// Held until the timer is set: neither end can come before it.
	p.mu.Lock()
	defer p.mu.Unlock()
	if !h.polls.parked(w, func() { go p.end(endWoken) }) {
		return false
	}
	// Its slot among the requests in flight (OnHeld) is given back as
	// the handler returns, at once.
	h.polls.held.Add(1)
	p.timer = h.clk.AfterFunc(holdFor(h.cfg.PollTimeout, nil), func() { p.end(endHeldOut) })
	pk.Parked(func() { p.end(endCancelled) })
	return true
}

// detached is ctx for an answer given later: it keeps only what Sync's
// answer calls (OnWoken). The rest of ctx's chain holds the request's and
// its connection's state, which a parked poll would keep for its hold.
func detached(ctx context.Context) context.Context {
	if fn, ok := ctx.Value(wokenKey{}).(func()); ok {
		return OnWoken(context.Background(), fn)
	}
	return context.Background()
}

type parkedEnd int

const (
	endWoken parkedEnd = iota
	endHeldOut
	endCancelled
)

// end answers p, the first time it is called, as Sync answers a held
// poll woken, run out or cancelled.
func (p *parkedPoll) end(how parkedEnd) {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	p.ended = true
	p.timer.Stop()
	p.mu.Unlock()
	p.h.polls.held.Add(-1)
	defer p.release()
	switch how {
	case endHeldOut:
		p.deliver(p.h.unchanged(p.gen, p.hubsDigest), nil)
	case endWoken:
		if resp, err := p.h.wokenOtherwise(p.machineID, p.w, p.gen); resp != nil || err != nil {
			p.deliver(resp, err)
			return
		}
		p.deliver(p.h.syncAnswer(p.ctx, p.machineID, p.hubsDigest, p.w, true))
	}
}
