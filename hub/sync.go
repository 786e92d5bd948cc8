package hub

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"einsora.dev/edge/hub/trust"
	"einsora.dev/edge/protocol"
)

// Errors Sync returns; the HTTP layer maps them to status codes.
var (
	ErrUnknownMachine = errors.New("unknown machine")
	ErrBadRequest     = errors.New("bad request")
	// ErrSuperseded: a newer poll of the same machine replaced this one.
	ErrSuperseded = errors.New("a newer poll of this machine replaced this one; if two agents share this machine's identity, give one a new machine ID and enrol it")
)

// Sync is the one call of the agent protocol, for the machine machineID
// (named by its client certificate, or the in-process agent's ID). It
// records the report, then answers with the machine's complete desired state
// at once when the agent's generation is behind, or holds the call until the
// machine is woken or the poll timeout passes. With WithParking, a poll to
// be held is parked instead, and Sync returns ErrParked at once.
func (h *Hub) Sync(ctx context.Context, machineID string, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
	// What comes before and after the hold is in functions of their own:
	// this frame stays on the poll's stack for as long as it is held, and
	// kept small it lets that stack shrink to 8 KiB (docs/performance.md,
	// "A held poll's stack").
	w, gen, release, err := h.syncRecord(ctx, machineID, req)
	if err != nil {
		return nil, err
	}
	hold := req.StoreID == h.store.ID() && req.Generation == gen && !h.logs.pending(machineID)
	if pk := parkingOf(ctx); hold && pk != nil && h.park(ctx, pk, machineID, req.HubsDigest, w, gen, release) {
		return nil, ErrParked
	}
	defer release()
	woken := false
	if hold {
		t := h.clk.NewTimer(holdFor(h.cfg.PollTimeout, nil))
		h.polls.held.Add(1)
		noteHeld(ctx)
		select {
		case <-w.wake:
			h.polls.held.Add(-1)
			t.Stop()
			if resp, err := h.wokenOtherwise(machineID, w, gen); resp != nil || err != nil {
				return resp, err
			}
			woken = true
		case <-t.C():
			h.polls.held.Add(-1)
			return h.unchanged(gen, req.HubsDigest), nil
		case <-ctx.Done():
			h.polls.held.Add(-1)
			t.Stop()
			return nil, ctx.Err()
		}
	}
	return h.syncAnswer(ctx, machineID, req.HubsDigest, w, woken)
}

// syncRecord checks req, readies the machine's poll to be woken and
// records the report. It returns the poll, the machine's generation and
// the poll's release, which the caller defers.
func (h *Hub) syncRecord(ctx context.Context, machineID string, req *protocol.SyncRequest) (*poll, int64, func(), error) {
	if err := CheckSyncRequest(req); err != nil {
		return nil, 0, nil, fmt.Errorf("sync %s: %w: %w", machineID, ErrBadRequest, err)
	}
	if h.feed.failingNow() {
		// Cut off from the store: answer at once, so the agent moves to
		// a replica that can serve, rather than wait on a store that may
		// not answer at all.
		return nil, 0, nil, fmt.Errorf("sync %s: %w: this replica cannot reach its store", machineID, ErrNotReady)
	}
	// Wait before reading the generation, so a wake between the read and
	// the wait is not lost.
	w, release := h.polls.wait(machineID, signOfLifeOf(ctx))
	rec, ok := h.recordWithin(machineID, req, release)
	if !ok {
		// The store has not committed the report within a presence
		// batch: it may not answer at all (a replica cut off, before
		// its batch fails). Send the agent to another replica now.
		return nil, 0, nil, fmt.Errorf("sync %s: %w: its report waits on this replica's store", machineID, ErrNotReady)
	}
	if rec.err != nil {
		release()
		return nil, 0, nil, rec.err
	}
	if rec.capacity {
		// What it offers changed: the leader's capacity view reads it.
		h.wakeLeader(ctx, true, machineID)
	}
	if rec.news {
		h.markDirty(machineID)
		h.notifyReplicas(ctx, observePrefix+machineID)
	}
	return w, rec.gen, release, nil
}

// unchanged answers a poll whose hold ran out: nothing changed.
func (h *Hub) unchanged(gen int64, hubsDigest string) *protocol.SyncResponse {
	return h.addHubs(&protocol.SyncResponse{StoreID: h.store.ID(), Generation: gen, Unchanged: true, HubTime: h.clk.Now()}, hubsDigest)
}

// wokenOtherwise answers a woken poll that is not to read its desired
// state: one superseded by a newer poll of its machine, or one sent to
// another replica (rebalance). Both are nil otherwise.
func (h *Hub) wokenOtherwise(machineID string, w *poll, gen int64) (*protocol.SyncResponse, error) {
	superseded, to := h.polls.wokenFor(w)
	if superseded {
		return nil, fmt.Errorf("sync %s: %w", machineID, ErrSuperseded)
	}
	if to != "" {
		// This replica holds more than its share (rebalance).
		return &protocol.SyncResponse{StoreID: h.store.ID(), Generation: gen, Unchanged: true, HubTime: h.clk.Now(),
			Reconnect: &protocol.Reconnect{URL: to}}, nil
	}
	return nil, nil
}

// syncAnswer answers a sync with the machine's desired state: at once, or
// once its held poll w was woken.
func (h *Hub) syncAnswer(ctx context.Context, machineID, hubsDigest string, w *poll, woken bool) (*protocol.SyncResponse, error) {
	if woken && h.feed.failingNow() {
		// Woken because this replica lost its store (touchLoop): send
		// the agent away now; reading its desired state would wait on
		// the store that does not answer, and hold the agent here.
		return nil, fmt.Errorf("sync %s: %w: this replica cannot reach its store", machineID, ErrNotReady)
	}
	// Bounded: a store that stops answering mid-read must not hold the
	// agent past a presence batch; the error sends it to another replica.
	dctx, cancel := context.WithTimeout(ctx, h.feed.every)
	defer cancel()
	resp, err := h.Desired(dctx, machineID)
	if woken && err == nil {
		h.wakeLatency(w)
		noteWoken(ctx)
	}
	if err == nil {
		resp = h.addHubs(resp, hubsDigest)
		resp.Logs = h.logs.take(machineID)
	}
	return resp, err
}

var codePattern = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

// CheckSyncRequest refuses what no honest agent sends; the HTTP decoder
// calls it too. Bounds on text are applied later, by truncation, since
// they decide nothing.
func CheckSyncRequest(req *protocol.SyncRequest) error {
	if req == nil {
		return errors.New("empty request")
	}
	if err := checkAgentProtocol(req.ProtocolVersion, protocol.Version); err != nil {
		return err
	}
	if req.Generation < 0 || req.AppliedGeneration < 0 {
		return errors.New("negative generation")
	}
	if len(req.Statuses) > protocol.MaxStatuses {
		return fmt.Errorf("%d statuses, at most %d", len(req.Statuses), protocol.MaxStatuses)
	}
	for _, s := range req.Statuses {
		// What reaches the store must be text any database takes, or one
		// agent's report could fail the batch it is written with.
		if s.Workload == "" || len(s.Workload) > protocol.MaxIDLength || trust.Text(s.Workload, protocol.MaxIDLength) != s.Workload {
			return fmt.Errorf("status with a workload ID of %d bytes that is empty, too long or not plain text", len(s.Workload))
		}
		if !codePattern.MatchString(string(s.Code)) {
			return fmt.Errorf("status of %s: code %q is not a word of at most 64 lowercase letters, digits and _", s.Workload, trust.Text(string(s.Code), 64))
		}
		if s.Mode != "" && !s.Mode.Valid() {
			return fmt.Errorf("status of %s: unknown mode", s.Workload)
		}
	}
	return nil
}

// recorded is what record returned.
type recorded struct {
	gen            int64
	news, capacity bool
	err            error
}

// recordWithin records req, waiting at most a presence batch interval for
// the commit. ok is false when it waited that long: the report is still
// written (or fails) in the background, news and all, and release, the
// poll's, is called only then, so the machine counts as connected here
// while its report waits in this hub's queue (rule 8: the hub's backlog
// is not the machine's silence). When ok, the caller releases.
func (h *Hub) recordWithin(machineID string, req *protocol.SyncRequest, release func()) (rec recorded, ok bool) {
	var (
		mu   sync.Mutex // orders the hand-over: either the caller takes the result, or the background finishes alone
		left bool
		out  = make(chan recorded, 1)
	)
	// Armed first: the wait is counted from the sync's arrival. Wall
	// time, as the store's own deadlines (contexts) are: it bounds a
	// store's silence, not a span of the hub's rules.
	t := time.NewTimer(h.feed.every)
	defer t.Stop()
	go func() {
		var r recorded
		r.gen, r.news, r.capacity, r.err = h.record(machineID, req)
		mu.Lock()
		gone := left
		if !gone {
			out <- r
		}
		mu.Unlock()
		if !gone {
			return
		}
		release()
		if r.err == nil && r.capacity {
			h.wakeLeader(context.Background(), true, machineID)
		}
		if r.err == nil && r.news {
			h.markDirty(machineID)
			h.notifyReplicas(context.Background(), observePrefix+machineID)
		}
	}()
	select {
	case r := <-out:
		return r, true
	case <-t.C:
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-out:
		return r, true
	default:
		left = true
		return recorded{}, false
	}
}
