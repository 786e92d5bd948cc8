package hub

import (
	"context"
	"errors"
	"fmt"
	"regexp"

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
// machine is woken or the poll timeout passes.
func (h *Hub) Sync(ctx context.Context, machineID string, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
	if err := CheckSyncRequest(req); err != nil {
		return nil, fmt.Errorf("sync %s: %w: %w", machineID, ErrBadRequest, err)
	}
	if h.feed.failingNow() {
		// Cut off from the store: answer at once, so the agent moves to
		// a replica that can serve, rather than wait on a store that may
		// not answer at all.
		return nil, fmt.Errorf("sync %s: %w: this replica cannot reach its store", machineID, ErrNotReady)
	}
	// Wait before reading the generation, so a wake between the read and
	// the wait is not lost.
	w, release := h.polls.wait(machineID)
	defer release()
	gen, news, err := h.record(machineID, req)
	if err != nil {
		return nil, err
	}
	if news {
		h.markDirty(machineID)
		h.notifyReplicas(ctx, observePrefix+machineID)
	}
	woken := false
	if req.StoreID == h.store.ID() && req.Generation == gen && !h.logs.pending(machineID) {
		t := h.clk.NewTimer(holdFor(h.cfg.PollTimeout, nil))
		h.polls.held.Add(1)
		select {
		case <-w.wake:
			h.polls.held.Add(-1)
			t.Stop()
			if h.polls.isSuperseded(w) {
				return nil, fmt.Errorf("sync %s: %w", machineID, ErrSuperseded)
			}
			woken = true
		case <-t.C():
			h.polls.held.Add(-1)
			return &protocol.SyncResponse{StoreID: h.store.ID(), Generation: gen, Unchanged: true, HubTime: h.clk.Now()}, nil
		case <-ctx.Done():
			h.polls.held.Add(-1)
			t.Stop()
			return nil, ctx.Err()
		}
	}
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
	}
	if err == nil {
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
