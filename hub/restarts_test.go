package hub

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

func TestRestartsOnTheTimelineAndRunningStaysRunning(t *testing.T) {
	dir := t.TempDir()
	h := openKeyedHub(t, filepath.Join(dir, "hub.db"), dir, clock.NewFake(epoch), io.Discard)
	h.machine("m-1")
	w, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: "job", Kind: protocol.KindContainer,
		Class: "cpu-1", Region: "local", Image: "sim:", Spec: protocol.WorkloadSpec{
			Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, Max: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	h.pass()
	w = h.workload(w.ID)
	resp := h.desired("m-1")
	st := func(code protocol.Code, restarts int) protocol.Status {
		s := status(w, protocol.ModeRun, code)
		s.Restarts = restarts
		return s
	}
	h.report("m-1", resp, st(protocol.CodeRunning, 0))
	wantState(t, h, w.ID, store.StateRunning)
	// Exited, waiting to restart: the agent says starting, restart 1.
	h.report("m-1", resp, st(protocol.CodeStarting, 1))
	wantState(t, h, w.ID, store.StateRunning)
	h.report("m-1", resp, st(protocol.CodeRunning, 1)) // the same restart again: no new line
	h.report("m-1", resp, st(protocol.CodeStarting, 2))
	wantState(t, h, w.ID, store.StateRunning)
	restarts := func() []string {
		tl, err := h.Timeline(context.Background(), w.ID)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range tl {
			if strings.HasPrefix(e.Text, "restarted") {
				out = append(out, e.Text)
			}
		}
		return out
	}
	got := restarts()
	want := []string{"restarted on its machine (restart 1 of on-failure:3)", "restarted on its machine (restart 2 of on-failure:3)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("timeline restarts:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Out of restarts, it exits for good and fails as before.
	code := 1
	s := st(protocol.CodeExited, 3)
	s.ExitCode = &code
	h.report("m-1", resp, s)
	wantState(t, h, w.ID, store.StateFailed)
	if got := restarts(); len(got) != 3 {
		t.Errorf("after the last restart: %v", got)
	}
	// A new attempt counts from zero again.
	if err := h.RunWorkload(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	h.pass()
	if w = h.workload(w.ID); w.Attempt != 2 || w.Restarts != 0 {
		t.Fatalf("new attempt: attempt %d, restarts %d", w.Attempt, w.Restarts)
	}
	resp = h.desired("m-1")
	h.report("m-1", resp, st(protocol.CodeStarting, 1))
	if got := restarts(); len(got) != 4 || got[3] != "restarted on its machine (restart 1 of on-failure:3)" {
		t.Errorf("second attempt: %v", got)
	}
}

func TestRestartPhrase(t *testing.T) {
	for _, tt := range []struct {
		n    int
		p    *protocol.RestartPolicy
		want string
	}{
		{2, &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, Max: 3}, "restart 2 of on-failure:3"},
		{5, &protocol.RestartPolicy{Policy: protocol.RestartAlways}, "restart 5, policy always"},
		{1, &protocol.RestartPolicy{Policy: protocol.RestartOnFailure}, "restart 1, policy on-failure"},
		{1, nil, "restart 1"},
	} {
		if got := restartPhrase(tt.n, tt.p); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}
