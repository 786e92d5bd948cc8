package hub

import (
	"context"
	"errors"
	"testing"
	"time"

	"einsora.dev/edge/internal/gctest"
	"einsora.dev/edge/protocol"
)

// parkedAnswer is what a parked poll's Deliver got.
type parkedAnswer struct {
	resp *protocol.SyncResponse
	err  error
}

// parkPoll makes a poll of id at the generation it has, asking to park it.
func (h *testHub) parkPoll(id string, d *protocol.SyncResponse) (<-chan parkedAnswer, func()) {
	h.t.Helper()
	return h.parkPollIn(context.Background(), id, d)
}

// parkPollIn is parkPoll, its request's context ctx.
func (h *testHub) parkPollIn(ctx context.Context, id string, d *protocol.SyncResponse) (<-chan parkedAnswer, func()) {
	h.t.Helper()
	got := make(chan parkedAnswer, 2)
	var cancel func()
	ctx = WithParking(ctx, &Parking{
		Parked:  func(c func()) { cancel = c },
		Deliver: func(resp *protocol.SyncResponse, err error) { got <- parkedAnswer{resp, err} },
	})
	if _, err := h.Sync(ctx, id, &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: d.StoreID, Generation: d.Generation}); !errors.Is(err, ErrParked) {
		h.t.Fatalf("a poll to hold: %v; want it parked", err)
	}
	return got, cancel
}

func (h *testHub) parkedAnswer(got <-chan parkedAnswer) parkedAnswer {
	h.t.Helper()
	select {
	case a := <-got:
		return a
	case <-time.After(5 * time.Second):
		h.t.Fatal("the parked poll got no answer")
		return parkedAnswer{}
	}
}

// A parked poll is held with no goroutine: its hold's end, on the hub's
// clock, answers it unchanged, a wake with its desired state, and a
// cancel not at all.
func TestParkedPollEndsByItsHoldItsWakeOrItsCancel(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	d := h.sync("m-1", &protocol.SyncRequest{})

	got, _ := h.parkPoll("m-1", d)
	if h.WaitingPolls() != 1 {
		t.Fatalf("%d polls held; want the parked one", h.WaitingPolls())
	}
	h.clk.Advance(time.Duration(float64(h.cfg.PollTimeout)*MinHoldFraction) - time.Second)
	select {
	case a := <-got:
		t.Fatalf("answered before its hold could end: %+v", a)
	case <-time.After(20 * time.Millisecond):
	}
	h.clk.Advance(h.cfg.PollTimeout)
	if a := h.parkedAnswer(got); a.err != nil || !a.resp.Unchanged || a.resp.Generation != d.Generation {
		t.Fatalf("at its hold's end: %+v, %v; want unchanged", a.resp, a.err)
	}

	got, _ = h.parkPoll("m-1", d)
	h.Wake("m-1")
	if a := h.parkedAnswer(got); a.err != nil || a.resp.Unchanged || a.resp.Generation != d.Generation {
		t.Fatalf("woken: %+v, %v; want its desired state", a.resp, a.err)
	}

	got, cancel := h.parkPoll("m-1", d)
	cancel()
	if h.WaitingPolls() != 0 || h.polls.connected("m-1") {
		t.Errorf("after the cancel: %d held, connected %v; want none", h.WaitingPolls(), h.polls.connected("m-1"))
	}
	h.Wake("m-1")
	h.clk.Advance(h.cfg.PollTimeout)
	select {
	case a := <-got:
		t.Fatalf("answered after its cancel: %+v", a)
	case <-time.After(20 * time.Millisecond):
	}
}

type requestStateKey struct{}

// A parked poll keeps of its request's context only what its answer
// calls (OnWoken): the rest of the chain holds the request's and its
// connection's state, for as long as the poll is parked.
func TestParkedPollKeepsNotItsRequestsContext(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	d := h.sync("m-1", &protocol.SyncRequest{})

	state, freed := gctest.Watched()
	woken := make(chan struct{}, 1)
	ctx := OnWoken(context.WithValue(context.Background(), requestStateKey{}, state), func() { woken <- struct{}{} })
	got, _ := h.parkPollIn(ctx, "m-1", d)
	state, ctx = nil, nil
	if !gctest.Freed(freed, 5*time.Second) {
		t.Fatal("the request's context was kept with its parked poll")
	}
	h.Wake("m-1")
	if a := h.parkedAnswer(got); a.err != nil || a.resp.Unchanged {
		t.Fatalf("woken: %+v, %v; want its desired state", a.resp, a.err)
	}
	select {
	case <-woken:
	default:
		t.Error("a parked poll the hub woke did not call its OnWoken")
	}
}
