package hub

import (
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
)

// presence is rule 8's one definition of a machine being online or
// offline. Every caller (placement's fleet, observe, sweep, the recording
// of reports, settling, the admin views) asks it, so the rule lives here.
//
// A machine is online while it synced within offlineAfter, or a poll of it
// waits on a connection that showed it alive within offlineAfter (a long
// hold alone proves nothing: the host may have vanished since it began).
// The hub's own downtime never counts against a machine:
// the time it was missed starts no earlier than this hub's start.
type presence struct {
	clk clock.Clock
	// offlineAfter: silent this long, a machine is offline (not offered
	// for placement, its statuses decide nothing).
	offlineAfter time.Duration
	// failAfter: offline this long, its running workloads fail.
	failAfter time.Duration
	// started is when this hub process started.
	started time.Time
	// held reports, when a poll of the machine waits now, when its
	// connection last showed the machine alive.
	held func(machineID string, now time.Time) (time.Time, bool)
	// feed is this replica's presence batches (feed.go).
	feed *presenceFeed
}

// blind reports whether this hub cannot tell a machine's silence from its
// own backlog now: it started less than a presence batch ago (the other
// replicas' batches may not have reached the store), or its own presence
// batches fail or lag. Like the hub's own downtime, that never counts
// against a machine: nothing is failed for being offline meanwhile.
func (p presence) blind() bool {
	now := p.clk.Now()
	return now.Sub(p.started) < p.feed.every || p.feed.stale(now)
}

// online reports whether m is online now.
func (p presence) online(m store.Machine) bool { return p.onlineAt(m.ID, m.LastSync, p.clk.Now()) }

// onlineAt is online for a machine known by its ID and last sync, at now:
// for judging a whole region at one instant.
func (p presence) onlineAt(id string, lastSync, now time.Time) bool {
	return p.recent(p.heardLast(id, lastSync, now), now)
}

// heardLast is when the machine was last heard from: its last sync or,
// when that alone cannot make it online, the last sign of life of a poll
// of it waiting now (a kernel call), if later. A sign of life counts as a
// sync: the presence batch writes it to the store as the last sync.
func (p presence) heardLast(id string, lastSync, now time.Time) time.Time {
	if p.recent(lastSync, now) {
		return lastSync
	}
	if heard, ok := p.held(id, now); ok && heard.After(lastSync) {
		return heard
	}
	return lastSync
}

// recent reports whether a machine last heard from at is online at now.
func (p presence) recent(at, now time.Time) bool {
	return !at.IsZero() && now.Sub(at) < p.offlineAfter
}

// offlineFor is how long this hub has missed m: since its last sync, or
// its waiting poll's last sign of life, and never counting from before
// this hub started.
func (p presence) offlineFor(m store.Machine) time.Duration {
	return p.silentFor(store.LastSync{Machine: m.ID, At: m.LastSync})
}

// silentFor is offlineFor for a machine known by its last sync alone.
func (p presence) silentFor(l store.LastSync) time.Duration {
	now := p.clk.Now()
	last := p.counted(l.At)
	if now.Sub(last) < p.offlineAfter {
		// Heard lately by the store alone: a waiting poll's sign of life
		// (a kernel call per poll) cannot change a verdict.
		return now.Sub(last)
	}
	if heard, ok := p.held(l.Machine, now); ok && heard.After(last) {
		last = heard
	}
	return max(now.Sub(last), 0)
}

// heard reports whether this hub heard from m within offlineAfter.
func (p presence) heard(l store.LastSync) bool { return p.silentFor(l) < p.offlineAfter }

// gone reports whether m has been missed long enough for its running
// workloads to fail.
func (p presence) gone(l store.LastSync) bool { return p.silentFor(l) >= p.failAfter }

// returning reports whether a report from m arriving at now ends a
// silence: m was silent for offlineAfter, or not heard since this hub
// started. (Not online: the reporting poll itself counts as connected.)
func (p presence) returning(m store.Machine, now time.Time) bool {
	return p.cutOff(now.Sub(m.LastSync)) || m.LastSync.Before(p.started)
}

// cutOff reports whether a machine silent for away was offline.
func (p presence) cutOff(away time.Duration) bool { return away >= p.offlineAfter }

// missed is how long this hub has missed a machine last heard at
// lastSync, at now: never counting from before this hub started, so the
// hub's own downtime (its restart, and its agents' spread return after
// it) is no partition.
func (p presence) missed(lastSync, now time.Time) time.Duration {
	return max(now.Sub(p.counted(lastSync)), 0)
}

// counted is when a silence since at starts to count: at, or this hub's
// start if later. The hub's own downtime never counts against a machine.
func (p presence) counted(at time.Time) time.Time {
	if at.Before(p.started) {
		return p.started
	}
	return at
}

// wasOnline reports whether m was online at t, by its last sync alone.
func (p presence) wasOnline(m store.Machine, t time.Time) bool {
	return !m.LastSync.IsZero() && m.LastSync.After(t.Add(-p.offlineAfter))
}

// justStarted reports whether this hub started less than offlineAfter
// ago: a machine online before it may not have synced with it yet.
func (p presence) justStarted() bool { return p.clk.Now().Sub(p.started) < p.offlineAfter }
