package serve_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"einsora.dev/edge/hub/serve"
	"einsora.dev/edge/hubclient"
)

// A fleet that arrives at once at a hub just started, faster than its
// reconnect rate, is queued after its handshake: the machines past the
// rate get 503 with a Retry-After at their slot, come back once, and are
// let in. No agent needs more than two syncs.
func TestJustStartedHubQueuesAFleetPastItsRate(t *testing.T) {
	const agents, rate = 8, 2
	e := startEnv(t, envOptions{pollTimeout: 5 * time.Second, limits: serve.Limits{
		ReconnectRate: rate, StartPhase: time.Minute, EnrollRate: 1000, EnrollBurst: agents,
	}})
	fleet := make([]*runningAgent, agents)
	for i := range fleet {
		dir, nw := e.enrollAt(e.url)
		fleet[i] = startAgent(t, dir, nw, hubclient.Backoff{})
	}
	waitFor(t, 20*time.Second, "every agent to sync", func() bool {
		for _, a := range fleet {
			if _, _, ok := a.rec.firstOKAfter(time.Time{}); !ok {
				return false
			}
		}
		return true
	})
	queued := 0
	for i, a := range fleet {
		_, n, _ := a.rec.firstOKAfter(time.Time{})
		if n > 2 {
			t.Errorf("agent %d took %d syncs, want at most two (queued once)", i, n)
		}
		for _, s := range a.rec.failures() {
			var he *hubclient.HubError
			if !errors.As(s.err, &he) || he.Code != http.StatusServiceUnavailable || he.RetryAfter <= 0 {
				t.Errorf("agent %d: %v, want 503 with a Retry-After", i, s.err)
				continue
			}
			queued++
		}
	}
	if queued < agents-2*rate {
		t.Errorf("%d agents queued, want at least %d past the rate", queued, agents-2*rate)
	}
	// Queueing machines is load: no replica sends it more to even out
	// the fleet meanwhile (TestBusyReplicaPublishesNoCount).
	if !e.srv.BusyNow() {
		t.Error("a hub that just queued machines is not busy")
	}
}

// A hub that drains to its own address (it is restarting) tells its agents
// the window to come back over, sized to its fleet with a floor.
func TestDrainToItselfCarriesTheReconnectWindow(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: 10 * time.Second})
	self, srv := e.extraServer("")
	dir, nw := e.enrollAt(self)
	a := startAgent(t, dir, nw, hubclient.Backoff{})
	waitFor(t, 5*time.Second, "the agent to poll", func() bool { return e.hub.WaitingPolls() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	var re *hubclient.ReconnectError
	waitFor(t, 5*time.Second, "the directed reconnect", func() bool {
		for _, s := range a.rec.all() {
			if s.done && errors.As(s.err, &re) {
				return true
			}
		}
		return false
	})
	if re.Window != serve.DefaultMinReconnectWindow {
		t.Errorf("window %s, want the floor %s for one agent", re.Window, serve.DefaultMinReconnectWindow)
	}
}
