package hub

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"einsora.dev/edge/hub/store"
)

// presenceFeed is this replica's share of presence across replicas: a
// machine is online while a replica holds its poll or heard from it within
// OfflineAfter, whichever replica that is. No replica writes per poll:
// each writes, every PresenceEvery, one batch moving the last sync of every
// machine whose poll it holds or whose quiet sync it took since the last
// batch; a sync that changes something (a machine back from silence, new
// statuses, a new generation) writes its machine's row at once. So the
// last sync in the store, which the leader reads, is never more than
// PresenceEvery (plus one commit) behind a machine in touch with any
// replica.
type presenceFeed struct {
	every time.Duration
	// mu guards the following fields.
	mu sync.Mutex
	// heard holds the machines whose sync left their row alone since the
	// last batch, and when. Bounded by the machines that may sync at all.
	heard map[string]time.Time
	// written is, for each poll held here at the last batch, the sign of
	// life (to the second) this replica's batches have written for it. A
	// held poll's sign of life moves only when its peer answers a
	// keepalive probe (every 25 s), so most batches (every 15 s) would
	// write it again unchanged: at 10,000 idle agents, most of an idle
	// hub's writes. Bounded by the polls held.
	written map[string]time.Time
	// inflight is when the batch being written began; zero when none.
	inflight time.Time
	// failing is set while the last batch failed for the store's sake
	// (unreachable, refusing); lagging while it was rolled back for
	// conflicts with other replicas' transactions past the store's
	// retries: the store answers, but this replica's presence is behind.
	failing, lagging bool
}

// PresenceEvery is how often a replica writes its presence batch: a third
// of OfflineAfter (15 s by default). A held poll's keepalives are sized to
// fit in the rest (serve.KeepAliveIdleFor).
func PresenceEvery(offlineAfter time.Duration) time.Duration { return offlineAfter / 3 }

func newPresenceFeed(every time.Duration) *presenceFeed {
	return &presenceFeed{every: every, heard: make(map[string]time.Time), written: make(map[string]time.Time)}
}

// HeardFrom takes a request of machineID that this hub sent away for its
// own overload (its line of requests full, or too slow) as the sign of
// life it is: the machine spoke, and the hub's backlog must never count as
// its silence (issue 13: overload never turns into a false offline). The
// next presence batch carries it, as a quiet sync. The caller vouches for
// the machine: its certificate was checked at its connection's handshake.
func (h *Hub) HeardFrom(machineID string) { h.feed.note(machineID, h.clk.Now()) }

// note records a quiet sync of machineID at for the next batch.
func (f *presenceFeed) note(machineID string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if at.After(f.heard[machineID]) {
		f.heard[machineID] = at
	}
}

// begin takes the machines heard since the last batch, by when they were
// last heard (to the second, rounded down, so a batch is a few
// statements), adds the held polls as heard at their connections' last
// sign of life unless a batch of this replica wrote that already (the
// store keeps the latest last sync it is given, so nothing is lost), and
// marks a batch in flight since now.
func (f *presenceFeed) begin(now time.Time, held map[string]time.Time) map[time.Time][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Polls no longer held are forgotten: a poll held again is written.
	for id := range f.written {
		if _, ok := held[id]; !ok {
			delete(f.written, id)
		}
	}
	for id, at := range held {
		w, ok := f.written[id]
		if !ok {
			f.written[id] = w // none written yet
		}
		if !at.Truncate(time.Second).After(w) {
			continue
		}
		if at.After(f.heard[id]) {
			f.heard[id] = at
		}
	}
	batch := make(map[time.Time][]string)
	for id, at := range f.heard {
		at = at.Truncate(time.Second)
		batch[at] = append(batch[at], id)
	}
	clear(f.heard)
	f.inflight = now
	return batch
}

// end closes the batch begun; a failed batch's machines go in the next.
func (f *presenceFeed) end(batch map[time.Time][]string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	contended := errors.Is(err, store.ErrContended)
	f.inflight, f.failing, f.lagging = time.Time{}, err != nil && !contended, contended
	if err == nil {
		for at, ids := range batch {
			for _, id := range ids {
				if w, held := f.written[id]; held && at.After(w) {
					f.written[id] = at
				}
			}
		}
		return
	}
	for at, ids := range batch {
		for _, id := range ids {
			if at.After(f.heard[id]) {
				f.heard[id] = at
			}
		}
	}
}

// stale reports whether this replica's own presence writes lag at now:
// its last batch failed or was contended, or one has been in flight for
// longer than a batch interval (an overloaded or cut-off store). The last
// syncs it reads may then be the hub's backlog, not the machines' silence.
func (f *presenceFeed) stale(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failing || f.lagging || !f.inflight.IsZero() && now.Sub(f.inflight) > f.every
}

// failingNow reports whether the last batch failed for the store's sake: a
// batch rolled back for conflicts says the store answers, and its agents
// are better kept than sent to replicas that share it.
func (f *presenceFeed) failingNow() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failing
}

// touchLoop writes this replica's presence batches until ctx is done.
func (h *Hub) touchLoop(ctx context.Context) {
	t := h.clk.NewTimer(h.feed.every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		err := h.touch(ctx)
		// Contended: the store answered, so the polls stay held here.
		contended := errors.Is(err, store.ErrContended)
		switch {
		case contended && ctx.Err() == nil:
			h.log.Warn("this replica's presence batch conflicted with other transactions past the store's retries; its machines go in the next batch, and none is failed for being offline meanwhile", "err", err)
		case err != nil && !failing && ctx.Err() == nil:
			h.log.Error("cannot write this replica's presence batch; no machine is failed for being offline until it can, and the polls held here are answered so their agents reconnect", "err", err)
			// Each poll answered re-reads the store: failing, its agent
			// is told to reconnect (httpapi), through a load balancer to
			// a replica that can reach the store.
			h.polls.wakeEvery()
		case err == nil && failing:
			h.log.Info("presence batch written again")
		}
		failing = err != nil && !contended
		t.Reset(h.feed.every)
	}
}

// touch writes one presence batch: the machines whose polls this replica
// holds now, as of their connections' last sign of life, and those it
// heard from quietly since the last batch. With a write batch limit
// (Config.WriteBatch: PostgreSQL's), it takes a transaction per so many
// machines, so that none conflicts with the whole table.
func (h *Hub) touch(ctx context.Context) error {
	now := h.clk.Now()
	batch := h.feed.begin(now, h.polls.heardAll(now))
	tctx, cancel := context.WithTimeout(ctx, h.feed.every)
	defer cancel()
	var err error
	// Even an empty batch commits: it is also this replica's probe of
	// its store (Ready, and Sync refusing at once while it fails).
	for _, part := range touchParts(batch, h.cfg.WriteBatch) {
		if err = h.store.Update(tctx, func(tx store.Tx) error {
			for _, g := range part {
				if err := tx.TouchMachines(g.ids, g.at); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			break
		}
	}
	h.feed.end(batch, err)
	return err
}

// touchGroup is machines heard last at one time.
type touchGroup struct {
	at  time.Time
	ids []string
}

// touchParts splits a presence batch into transactions of at most limit
// machines (0: one for all), in time order; there is always one.
func touchParts(batch map[time.Time][]string, limit int) [][]touchGroup {
	parts := [][]touchGroup{nil}
	room := limit
	for _, at := range slices.SortedFunc(maps.Keys(batch), time.Time.Compare) {
		ids := batch[at]
		for len(ids) > 0 {
			if limit > 0 && room == 0 {
				parts, room = append(parts, nil), limit
			}
			n := len(ids)
			if limit > 0 {
				n = min(n, room)
				room -= n
			}
			last := len(parts) - 1
			parts[last] = append(parts[last], touchGroup{at: at, ids: ids[:n:n]})
			ids = ids[n:]
		}
	}
	return parts
}
