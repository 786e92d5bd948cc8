package hub

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/storetest"
	"einsora.dev/edge/protocol"
)

func replicaAt(url string, polls int) store.Replica {
	return store.Replica{URL: url, Polls: polls}
}

func TestRebalanceSendsHalfTheSurplusToThoseBelowTheirShare(t *testing.T) {
	const self, a, b = "https://self:1", "https://a:1", "https://b:1"
	for _, c := range []struct {
		name string
		held int
		live []store.Replica
		want string
	}{
		{"one empty", 1200, []store.Replica{replicaAt(self, 0), replicaAt(a, 600), replicaAt(b, 0)}, "[{https://b:1 300}]"},
		{"shared by how far below", 1500, []store.Replica{replicaAt(a, 300), replicaAt(b, 0)}, "[{https://a:1 150} {https://b:1 300}]"},
		{"within the slack", 650, []store.Replica{replicaAt(a, 600), replicaAt(b, 550)}, "[]"},
		{"within the least slack", 30, []store.Replica{replicaAt(a, 0)}, "[]"},
		{"past the least slack", 36, []store.Replica{replicaAt(a, 0)}, "[{https://a:1 9}]"},
		{"a replica that says nothing is no peer", 1000, []store.Replica{replicaAt(a, -1)}, "[]"},
		{"nor counted", 1000, []store.Replica{replicaAt(a, -1), replicaAt(b, 1000)}, "[]"},
		{"at most a round's moves", 10000, []store.Replica{replicaAt(a, 0)}, fmt.Sprintf("[{https://a:1 %d}]", maxMovesPerRound)},
		{"a URL agents refuse", 1000, []store.Replica{replicaAt("http://a:1", 0)}, "[]"},
		{"alone", 1000, []store.Replica{replicaAt(self, 1000)}, "[]"},
	} {
		got := fmt.Sprint(rebalance(self, c.held, c.live))
		if got == "[]" && c.want == "[]" {
			continue
		}
		if got != c.want {
			t.Errorf("%s: moves %s, want %s", c.name, got, c.want)
		}
	}
}

// Replicas rebalancing together, each from the same round's counts, bring
// randomised fleets within the slack of their share in a few rounds, and no
// round takes a replica that was below its share past it: the fleet never
// swings back and forth.
func TestRebalanceRoundsConvergeWithoutSwinging(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 3))
	for trial := range 300 {
		n := 2 + rng.IntN(6)
		held := make([]int, n)
		for i := range held {
			if rng.IntN(3) > 0 {
				held[i] = rng.IntN(8000)
			}
		}
		url := func(i int) string { return fmt.Sprintf("https://r%d:1", i) }
		total := 0
		for _, h := range held {
			total += h
		}
		share := float64(total) / float64(n)
		settled := false
		for round := range 30 {
			live := make([]store.Replica, n)
			for i, h := range held {
				live[i] = replicaAt(url(i), h)
			}
			next := append([]int(nil), held...)
			for i := range held {
				for _, m := range rebalance(url(i), held[i], live) {
					var to int
					fmt.Sscanf(m.url, "https://r%d:1", &to)
					next[i] -= m.n
					next[to] += m.n
				}
			}
			for i := range held {
				if float64(held[i]) < share && float64(next[i]) > share+1 {
					t.Fatalf("trial %d round %d: replica %d went from %d to %d, past its share %.0f (fleet %v)", trial, round, i, held[i], next[i], share, held)
				}
				if next[i] < 0 {
					t.Fatalf("trial %d: replica %d sent more than it held", trial, i)
				}
			}
			held = next
			settled = true
			for i := range held {
				if float64(held[i])-share > max(share*RebalanceSlack, rebalanceMinSlack)+1 {
					settled = false
				}
			}
			if settled {
				break
			}
		}
		if !settled {
			t.Errorf("trial %d: not within the slack of %.0f after 30 rounds: %v", trial, share, held)
		}
	}
}

// A replica holding more than its share answers some of its held polls
// with a directed reconnect to the replica holding fewer; the in-process
// agent's poll, which has no connection to move, stays.
func TestReplicaHoldingMoreThanItsShareSendsAgentsToOneHoldingFewer(t *testing.T) {
	st, clk := sharedStore(t)
	const aURL, bURL = "https://a.example:8443", "https://b.example:8443"
	a := &testHub{Hub: replicaOn(t, st, clk, aURL), t: t, clk: clk, st: st}
	b := replicaOn(t, st, clk, bURL)
	type answer struct {
		id   string
		resp *protocol.SyncResponse
	}
	answers := make(chan answer, 64)
	ctx, cancel := context.WithCancel(context.Background())
	var polling sync.WaitGroup
	t.Cleanup(func() { cancel(); polling.Wait() })
	hold := func(id string, ctx context.Context) {
		a.machine(id)
		d := a.desired(id)
		polling.Go(func() {
			resp, err := a.Sync(ctx, id, &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: d.StoreID, Generation: d.Generation})
			if err == nil {
				answers <- answer{id, resp}
			}
		})
	}
	for i := range 40 {
		hold(fmt.Sprintf("m-%d", i), WithSignOfLife(ctx, clk.Now))
	}
	hold("in-process", ctx) // no connection: no sign of life
	waitTimers(t, clk, 41)
	refresh(t, b, b)  // holds none, and says so from its second refresh
	refresh(t, a.Hub) // a's first: in flux, it sends none
	// Still live (listed to agents) but not fresh: no agent goes to it.
	clk.Advance(2*ReplicaRefresh + time.Second)
	refresh(t, a.Hub)
	if n := a.waiting(); n != 41 {
		t.Fatalf("%d agents sent to a replica not heard of for %s", 41-n, 2*ReplicaRefresh+time.Second)
	}
	refresh(t, b)
	a.leaving.Store(true)
	refresh(t, a.Hub)
	if n := a.waiting(); n != 41 {
		t.Fatalf("a leaving replica sent %d agents away", 41-n)
	}
	a.leaving.Store(false)
	refresh(t, a.Hub) // 41 against 0: a share of 20.5, half the surplus is 10
	if n := a.waiting(); n != 31 {
		t.Fatalf("%d polls wait, want 31 (10 moved)", n)
	}
	moved := map[string]bool{}
	for range 10 {
		select {
		case got := <-answers:
			if r := got.resp.Reconnect; r == nil || r.URL != bURL || !got.resp.Unchanged {
				t.Fatalf("%s answered %+v, want a directed reconnect to %s", got.id, got.resp, bURL)
			}
			moved[got.id] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d polls answered, want 10", len(moved))
		}
	}
	if moved["in-process"] {
		t.Error("the in-process agent's poll was moved")
	}
	// 31 against 0 is within the least slack: no more move.
	refresh(t, a.Hub)
	if n := a.waiting(); n != 31 {
		t.Errorf("%d polls wait after a refresh within the slack, want 31", n)
	}
}

// A busy replica (SetBusy) publishes no count while busy, and a leaving
// one (draining) none from then on: no replica sends either agents.
func TestLeavingOrBusyReplicaPublishesNoCount(t *testing.T) {
	st, clk := sharedStore(t)
	const bURL = "https://b.example:8443"
	b := replicaOn(t, st, clk, bURL)
	refresh(t, b)
	count := func(url string) int { return storetest.ReplicaPolls(t, st, url) }
	if got := count(bURL); got != -1 {
		t.Fatalf("b published %d polls at its first refresh, want none (-1): it has no count to compare", got)
	}
	refresh(t, b)
	if got := count(bURL); got != 0 {
		t.Fatalf("b published %d polls, want 0", got)
	}
	busy := true
	b.SetBusy(func() bool { return busy })
	refresh(t, b)
	if got := count(bURL); got != -1 {
		t.Errorf("a busy replica published %d polls, want none (-1)", got)
	}
	busy = false
	refresh(t, b)
	if got := count(bURL); got != 0 {
		t.Errorf("a replica no longer busy published %d polls, want 0", got)
	}
	if err := b.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := count(bURL); got != -1 {
		t.Errorf("a leaving replica published %d polls, want none (-1)", got)
	}
	refresh(t, b)
	if got := count(bURL); got != -1 {
		t.Errorf("a leaving replica's next refresh published %d polls, want none (-1)", got)
	}
}

// Only polls that came over a connection are sent away: the in-process
// agent's (no sign of life) has nowhere to go.
func TestOnlyConnectedPollsAreSentAway(t *testing.T) {
	p := polls{waiting: make(map[string]*poll)}
	alive := func() time.Time { return epoch }
	a, _ := p.wait("m-a", alive)
	b, _ := p.wait("m-b", alive)
	in, _ := p.wait("in-process", nil)
	if n := p.sendAway(10, "https://b.example:8443"); n != 2 {
		t.Errorf("sent %d away, want the 2 with a connection", n)
	}
	for _, w := range []*poll{a, b} {
		if moveTo(&p, w) != "https://b.example:8443" {
			t.Error("a connected poll was not sent to b")
		}
	}
	if !p.connected("in-process") || moveTo(&p, in) != "" {
		t.Error("the in-process agent's poll was sent away")
	}
	if n := p.sendAway(10, "https://b.example:8443"); n != 0 {
		t.Errorf("sent %d more away, want none", n)
	}
}

// A count that moved by more than the slack since the last refresh, less
// the agents sent away since, is in flux: agents still arriving (a cold
// connect, a storm of failovers) or answered in a burst of changes.
func TestCountInFluxIsNeitherPublishedNorActedOn(t *testing.T) {
	var c countHistory
	for _, step := range []struct {
		held, sent int
		want       bool
	}{
		{1000, 0, false}, // the first: nothing to compare
		{1000, 0, true},
		{1100, 0, true},  // within 10%
		{1400, 0, false}, // arriving
		{1400, 300, true},
		{1100, 0, true}, // the 300 sent away
		{800, 0, false}, // answered in a burst
		{20, 0, false},
		{30, 0, true}, // within the least slack
	} {
		if got := c.steady(step.held); got != step.want {
			t.Fatalf("count %d after %d: steady %v, want %v", step.held, c.prev, got, step.want)
		}
		c.sent(step.sent)
	}
}

// A replica whose count is in flux publishes none and sends no agent away,
// whatever its surplus.
func TestReplicaInFluxSendsNoAgent(t *testing.T) {
	st, clk := sharedStore(t)
	a := &testHub{Hub: replicaOn(t, st, clk, "https://a.example:8443"), t: t, clk: clk, st: st}
	b := replicaOn(t, st, clk, "https://b.example:8443")
	refresh(t, b, b)
	ctx, cancel := context.WithCancel(context.Background())
	var polling sync.WaitGroup
	t.Cleanup(func() { cancel(); polling.Wait() })
	for i := range 40 {
		id := fmt.Sprintf("m-%d", i)
		a.machine(id)
		d := a.desired(id)
		polling.Go(func() {
			a.Sync(WithSignOfLife(ctx, clk.Now), id, &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: d.StoreID, Generation: d.Generation})
		})
	}
	waitTimers(t, clk, 40)
	a.counts.steady(0) // a's last refresh found none: 40 arrived since
	refresh(t, a.Hub)
	if n := a.waiting(); n != 40 {
		t.Errorf("a replica in flux sent %d agents away", 40-n)
	}
}

// waiting is how many polls wait on h now; sendAway takes its polls out
// at once, before their callers return.
func (h *testHub) waiting() int {
	h.polls.mu.Lock()
	defer h.polls.mu.Unlock()
	return len(h.polls.waiting)
}

func moveTo(p *polls, w *poll) string {
	_, to := p.wokenFor(w)
	return to
}
