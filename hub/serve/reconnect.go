package serve

import (
	"sync"
	"time"

	"einsora.dev/edge/clock"
)

// reconnectWindow is the window agents are told to spread their return
// over: the fleet connected now over the rate the hub takes agents back
// at, never under the floor.
func reconnectWindow(connected int64, rate float64, floor time.Duration) time.Duration {
	if rate <= 0 {
		return floor
	}
	return max(floor, time.Duration(float64(connected)/rate*float64(time.Second)))
}

// startGate admits machines' requests at a rate during the server's first
// phase. A request past the rate is given the next free slot of a virtual
// queue at that rate, so the Retry-Afters of a fleet that returned at once
// spread over exactly its backlog; a machine back at its slot is let in
// without waiting again, so each agent comes back once.
type startGate struct {
	clk   clock.Clock
	rate  float64
	burst float64
	until time.Time
	// mu guards the following fields.
	mu     sync.Mutex
	tokens float64
	last   time.Time
	// slot is the last slot handed out.
	slot time.Time
	// slots are the machines told to come back, and when; at most
	// maxSlots (past it, a machine is told when but not remembered).
	slots map[string]time.Time
}

const maxSlots = 1 << 18

func newStartGate(clk clock.Clock, rate float64, phase time.Duration) *startGate {
	now := clk.Now()
	rate = max(rate, 1)
	// A second's worth at once: the first agents are let in without delay.
	return &startGate{clk: clk, rate: rate, burst: rate, until: now.Add(phase), tokens: rate, last: now, slot: now, slots: make(map[string]time.Time)}
}

// admit lets machine's request in, or says after how long to come back.
func (g *startGate) admit(machine string) (bool, time.Duration) {
	now := g.clk.Now()
	if !now.Before(g.until) {
		return true, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if at, ok := g.slots[machine]; ok {
		if !now.Before(at) {
			delete(g.slots, machine)
			return true, 0
		}
		return false, at.Sub(now) // early: the same slot again
	}
	g.tokens = min(g.burst, g.tokens+now.Sub(g.last).Seconds()*g.rate)
	g.last = now
	// While a queue is waiting, a newcomer joins its end.
	if !g.slot.After(now) && g.tokens >= 1 {
		g.tokens--
		return true, 0
	}
	g.slot = clock.Later(g.slot, now).Add(time.Duration(float64(time.Second) / g.rate))
	if len(g.slots) < maxSlots {
		g.slots[machine] = g.slot
	}
	return false, g.slot.Sub(now)
}
