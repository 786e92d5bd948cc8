package hub

import (
	"sync"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Rebalancing. An agent stays on the replica it reached: one sent away by
// a replica that failed, restarted or was busy moves to the next and stays
// there, so a rolling restart would end with the whole fleet on one
// replica. Each replica therefore publishes how many polls it holds (in
// the registry, every ReplicaRefresh), and one holding more than its share
// of the fleet, past a slack, sends some of its agents to those holding
// less, with a directed reconnect: at most half its surplus a round, so
// that counts read up to a round late never swing the fleet back and forth.
const (
	// RebalanceSlack is the surplus, as a fraction of its share, that a
	// replica keeps rather than move agents (each move costs the agent
	// a handshake): at least rebalanceMinSlack polls.
	RebalanceSlack    = 0.1
	rebalanceMinSlack = 16
	// maxMovesPerRound bounds the handshakes one replica's moves cost
	// the others each ReplicaRefresh.
	maxMovesPerRound = 1000
)

// countHistory is a replica's count of polls at its last refresh, and how
// many it sent away then: a count that moved since by more than the slack
// (agents arriving in a cold connect or a storm of failovers, or answered
// in a burst of changes) is in flux, and another replica's count, read up
// to a refresh apart, says nothing of the same moment. A replica in flux
// publishes no count and sends no agent; its first refresh is in flux.
type countHistory struct {
	// mu guards the following fields.
	mu          sync.Mutex
	known       bool
	prev, moved int
}

// steady records held as this refresh's count and reports whether it is
// within the slack of the last one, less the agents sent away since.
func (c *countHistory) steady(held int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	drift := held - (c.prev - c.moved)
	ok := c.known && max(drift, -drift) <= max(int(RebalanceSlack*float64(held)), rebalanceMinSlack)
	c.known, c.prev, c.moved = true, held, 0
	return ok
}

// sent records agents sent away at this refresh.
func (c *countHistory) sent(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.moved += n
}

// agentMove is n polls to send to the replica at url.
type agentMove struct {
	url string
	n   int
}

// rebalance is what the replica at self, holding held polls, sends where,
// given the live replicas as the registry read them (self among them or
// not), in their order. Replicas that do not publish a count (Polls < 0)
// are neither counted nor sent to.
func rebalance(self string, held int, live []store.Replica) []agentMove {
	total, n := held, 1
	var peers []store.Replica
	for _, r := range live {
		if r.URL == self || r.Polls < 0 || protocol.CheckHubURL(r.URL) != nil {
			continue
		}
		peers = append(peers, r)
		total += r.Polls
		n++
	}
	if len(peers) == 0 {
		return nil
	}
	share := float64(total) / float64(n)
	surplus := float64(held) - share
	if surplus <= max(share*RebalanceSlack, rebalanceMinSlack) {
		return nil
	}
	budget := min(int(surplus+1)/2, maxMovesPerRound)
	// Shared among those below their share by how far below: the others'
	// moves, shared the same way, never take one past it.
	var short float64
	for _, r := range peers {
		short += max(share-float64(r.Polls), 0)
	}
	var moves []agentMove
	for _, r := range peers {
		if k := int(float64(budget) * max(share-float64(r.Polls), 0) / short); k > 0 {
			moves = append(moves, agentMove{url: r.URL, n: k})
		}
	}
	return moves
}
