package agent

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/protocol"
)

func TestHubProtocolSkew(t *testing.T) {
	for _, tc := range []struct {
		hub, agent int
		ok         bool
	}{
		{hub: 2, agent: 2, ok: true},
		{hub: 3, agent: 2, ok: true}, // a newer hub answers older agents
		{hub: 1, agent: 2},
		{hub: 0, agent: 1, ok: true}, // hubs from before the field speak 1
		{hub: 0, agent: 2},
	} {
		err := checkHubProtocol(tc.hub, tc.agent)
		if (err == nil) != tc.ok {
			t.Errorf("hub %d, agent %d: got %v, want ok=%v", tc.hub, tc.agent, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "upgrade the hub first") {
			t.Errorf("hub %d, agent %d: %q does not say what to do", tc.hub, tc.agent, err)
		}
	}
}

// An agent upgraded past its hub refuses the hub's answers before applying
// any of them: a removal from the old hub is not carried out, and the
// workload keeps running.
func TestOlderHubRefusedAndWorkloadsKept(t *testing.T) {
	t.Cleanup(func() { ownProtocol.Store(protocol.Version) })
	f := newFakeHub()
	h := startAgent(t, t.TempDir(), f)
	f.set(run("w-1", 1))
	waitCode(t, f, "w-1", protocol.CodeRunning)
	held := heldGeneration(h.agent)

	ownProtocol.Store(protocol.Version + 1)
	f.mu.Lock()
	next := f.desired
	f.mu.Unlock()
	next.Generation++
	next.ProtocolVersion = protocol.Version
	next.Workloads = []protocol.DesiredWorkload{withMode(run("w-1", 1), protocol.ModeRemove)}
	f.setRaw(next)
	waitFor(t, "the refusal", func() bool {
		h.agent.mu.Lock()
		defer h.agent.mu.Unlock()
		return h.agent.lastSyncErr != nil
	})
	h.agent.mu.Lock()
	msg := h.agent.lastSyncErr.Error()
	h.agent.mu.Unlock()
	for _, want := range []string{"protocol version " + strconv.Itoa(protocol.Version), strconv.Itoa(protocol.Version + 1), "upgrade the hub first"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q lacks %q", msg, want)
		}
	}
	time.Sleep(100 * time.Millisecond) // let the apply loop act if it wrongly would
	list, _ := h.sim.List(context.Background())
	if len(list) != 1 || list[0].State != drivers.StateRunning {
		t.Errorf("after an older hub's removal: got %+v, want w-1 running", list)
	}
	if _, err := os.Stat(h.sim.DataDir("w-1")); err != nil {
		t.Errorf("data after an older hub's removal: %v", err)
	}
	if got := heldGeneration(h.agent); got != held {
		t.Errorf("agent holds generation %d, want %d (the refused answer's is %d)", got, held, next.Generation)
	}
}

func heldGeneration(a *Agent) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state.Desired.Generation
}
