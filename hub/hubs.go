package hub

import (
	"context"
	"slices"
	"sync"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// The replica registry: each replica started with a URL (Config.URL) says
// in the store every ReplicaRefresh that it is alive, and a replica not
// heard of for ReplicaLive is left out of the list agents are sent, and
// pruned. Operators start replicas, so MaxReplicas is a bound on a bug, not
// on an attack.
const (
	ReplicaRefresh = 10 * time.Second
	ReplicaLive    = 3 * ReplicaRefresh
	MaxReplicas    = 64
)

// replicaList is the live replicas' URLs as last read, this one first.
type replicaList struct {
	// mu guards the following fields.
	mu     sync.Mutex
	urls   []string
	digest string
}

func (l *replicaList) get() ([]string, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.urls, l.digest
}

func (l *replicaList) set(urls []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.urls, l.digest = urls, protocol.HubsDigest(urls)
}

// Hubs is the live replicas' agents' URLs as agents are sent them: this
// one's first, then the others in URL order, at most protocol.MaxHubs.
func (h *Hub) Hubs() []string {
	urls, _ := h.replicas.get()
	return slices.Clone(urls)
}

// RefreshReplicas records this replica as alive (when it has a URL) with
// the polls it holds, prunes those not heard of for ReplicaLive, reads the
// live ones, and sends agents to those holding less when this one holds
// more than its share (rebalance). Run calls it every ReplicaRefresh;
// tests call it directly.
func (h *Hub) RefreshReplicas(ctx context.Context) error {
	h.refreshing.Lock()
	defer h.refreshing.Unlock()
	now := h.clk.Now()
	held := h.WaitingPolls()
	steady := h.counts.steady(held)
	var live []store.Replica
	read := func(tx store.Tx) (err error) {
		live, err = tx.Replicas(now.Add(-ReplicaLive), MaxReplicas)
		return err
	}
	var err error
	if h.cfg.URL == "" {
		err = h.store.View(ctx, read)
	} else {
		full := false
		err = h.store.Update(ctx, func(tx store.Tx) error {
			full = false
			if _, err := tx.PruneReplicas(now.Add(-ReplicaLive)); err != nil {
				return err
			}
			// Pruned, and never let past MaxReplicas rows: these are all.
			known, err := tx.Replicas(time.Time{}, MaxReplicas)
			if err != nil {
				return err
			}
			if len(known) >= MaxReplicas && !slices.ContainsFunc(known, func(r store.Replica) bool { return r.URL == h.cfg.URL }) {
				full = true
			} else if err := tx.PutReplica(store.Replica{URL: h.cfg.URL, Seen: now, Polls: h.published(held, steady)}); err != nil {
				return err
			}
			return read(tx)
		})
		if full {
			h.log.Warn("the replica registry is full; this replica's URL is not published to agents", "url", h.cfg.URL, "max", MaxReplicas)
		}
	}
	if err != nil {
		return err
	}
	urls := make([]string, 0, len(live)+1)
	if h.cfg.URL != "" {
		urls = append(urls, h.cfg.URL)
	}
	for _, r := range live {
		if len(urls) == protocol.MaxHubs {
			break
		}
		if r.URL != h.cfg.URL && protocol.CheckHubURL(r.URL) == nil {
			urls = append(urls, r.URL)
		}
	}
	if len(urls) == 0 {
		urls = nil
	}
	h.replicas.set(urls)
	if h.cfg.URL != "" && !h.leaving.Load() && steady {
		h.counts.sent(h.sendAway(rebalance(h.cfg.URL, held, freshOf(live, now))))
	}
	return nil
}

// published is the count this replica writes: none (-1) once it is
// leaving, while its count is in flux (countHistory), or while it is busy
// (SetBusy): its count is then low for its load, not for want of agents,
// and agents sent to it would be turned away again (a cold connect, a
// storm of failovers). Read in the transaction, so a refresh that began
// before Leave never writes a count after Leave's -1.
func (h *Hub) published(held int, steady bool) int {
	if h.leaving.Load() || !steady {
		return -1
	}
	if busy := h.busy.Load(); busy != nil && (*busy)() {
		return -1
	}
	return held
}

// SetBusy gives the hub its server's word on load: busy reports whether
// the server turned a machine's request or handshake away, or made it
// wait, for its own load within the last ReplicaRefresh.
func (h *Hub) SetBusy(busy func() bool) { h.busy.Store(&busy) }

// freshOf is the replicas that said they were alive within two refreshes:
// agents are sent only to those, not to one that stopped a while ago and
// is not pruned yet.
func freshOf(live []store.Replica, now time.Time) []store.Replica {
	return slices.DeleteFunc(slices.Clone(live), func(r store.Replica) bool { return r.Seen.Before(now.Add(-2 * ReplicaRefresh)) })
}

// sendAway makes the moves rebalance chose, and returns how many agents
// it sent.
func (h *Hub) sendAway(moves []agentMove) int {
	total := 0
	for _, m := range moves {
		if sent := h.polls.sendAway(m.n, m.url); sent > 0 {
			total += sent
			h.log.Info("this replica holds more than its share of the fleet's polls; sending agents to a replica holding fewer", "agents", sent, "to", m.url)
		}
	}
	return total
}

// Leave tells the other replicas that this one is going (a drain): it
// publishes no count from now on, so none sends it agents, and it sends
// none itself. Its URL stays listed until it stops saying it is alive.
func (h *Hub) Leave(ctx context.Context) error {
	h.leaving.Store(true)
	return h.RefreshReplicas(ctx)
}

// replicaLoop refreshes the registry every ReplicaRefresh until ctx is
// done.
func (h *Hub) replicaLoop(ctx context.Context) {
	for {
		if err := h.RefreshReplicas(ctx); err != nil && ctx.Err() == nil {
			// Agents keep the list they have; it only ages.
			h.log.Warn("cannot refresh the replica registry; agents keep the replica URLs they know", "err", err)
		}
		t := h.clk.NewTimer(ReplicaRefresh)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// addHubs gives resp the live replicas' URLs when they differ from the
// set the agent named by digest. resp is the caller's own (Desired
// answers a copy of the cached state); the list is shared, never changed
// once set.
func (h *Hub) addHubs(resp *protocol.SyncResponse, digest string) *protocol.SyncResponse {
	if urls, d := h.replicas.get(); len(urls) > 0 && d != digest {
		resp.Hubs = urls
	}
	return resp
}

type wokenKey struct{}

// OnWoken returns ctx carrying fn, which Sync calls when it answers the
// poll early because the hub woke it (desired state changed, or the
// replicas' notifications were missed): the HTTP layer then gives the
// machine back the request it was charged, since the hub, not the agent,
// cut the poll short.
func OnWoken(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, wokenKey{}, fn)
}

type heldKey struct{}

// OnHeld returns ctx carrying fn, which Sync calls when it begins to hold
// the poll, its work done: the HTTP layer then gives back the poll's share
// of the requests the hub works on at once, since a held poll costs
// nothing while it waits.
func OnHeld(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, heldKey{}, fn)
}

func noteHeld(ctx context.Context) {
	if fn, ok := ctx.Value(heldKey{}).(func()); ok && fn != nil {
		fn()
	}
}

func noteWoken(ctx context.Context) {
	if fn, ok := ctx.Value(wokenKey{}).(func()); ok && fn != nil {
		fn()
	}
}
