package agent

import (
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/agent/logs"
	"einsora.dev/edge/protocol"
)

// TestLogsCollected: a workload's output (the sim's state lines) is kept
// in the agent's log store as it runs, and deleted with the workload.
func TestLogsCollected(t *testing.T) {
	f := newFakeHub()
	h := startAgent(t, t.TempDir(), f)
	w := run("w-1", 1)
	w.Image = "sim:exit-after=300ms,exit-code=2"
	f.set(w)
	waitCode(t, f, "w-1", protocol.CodeExited)
	var es []logs.Entry
	waitFor(t, "the exit line", func() bool {
		es, _ = h.agent.Logs().Read("w-1", 0, time.Time{})
		return len(es) > 0 && strings.HasSuffix(es[len(es)-1].Line, "is exited with code 2")
	})
	var lines []string
	for _, e := range es {
		if e.Stream != logs.System {
			t.Errorf("entry %+v, want system", e)
		}
		lines = append(lines, e.Line)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "sim: w-1 attempt 1 is running") {
		t.Errorf("no running line in %q", lines)
	}
	if tail, _ := h.agent.Logs().Read("w-1", 1, time.Time{}); len(tail) != 1 || tail[0].Line != es[len(es)-1].Line {
		t.Errorf("tail 1: %+v", tail)
	}

	f.set(withMode(w, protocol.ModeRemove))
	waitCode(t, f, "w-1", protocol.CodeRemoved)
	waitFor(t, "the output deleted", func() bool {
		es, _ := h.agent.Logs().Read("w-1", 0, time.Time{})
		return len(es) == 0
	})
}
