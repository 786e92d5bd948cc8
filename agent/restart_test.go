package agent

import (
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/protocol"
)

func TestBackoff(t *testing.T) {
	for count, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
		if got := backoff(time.Second, 5*time.Second, count); got != min(want, 5*time.Second) {
			t.Errorf("backoff(count %d) = %s, want %s", count, got, min(want, 5*time.Second))
		}
	}
	if got := backoff(time.Second, time.Minute, 1000); got != time.Minute {
		t.Errorf("backoff(count 1000) = %s, want the limit", got)
	}
}

// TestRestartDecisions: the policy, the bound and the backoff, on an
// injected clock.
func TestRestartDecisions(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const base, limit = time.Second, time.Minute
	dw := func(r *protocol.RestartPolicy) protocol.DesiredWorkload {
		return protocol.DesiredWorkload{ID: "w", Attempt: 1, WorkloadSpec: protocol.WorkloadSpec{Restart: r}}
	}
	exited := func(code int) drivers.Instance {
		return drivers.Instance{Workload: "w", Attempt: 1, State: drivers.StateExited, ExitCode: code}
	}
	onFailure2 := &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, Max: 2}
	tests := []struct {
		name  string
		dw    protocol.DesiredWorkload
		in    drivers.Instance
		count int
		want  restartDecision
	}{
		{"no policy", dw(nil), exited(3), 0, restartNone},
		{"policy no", dw(&protocol.RestartPolicy{Policy: protocol.RestartNo}), exited(3), 0, restartNone},
		{"on-failure after success", dw(onFailure2), exited(0), 0, restartNone},
		{"on-failure after failure", dw(onFailure2), exited(3), 0, restartWait},
		{"on-failure after oom", dw(onFailure2), drivers.Instance{Workload: "w", Attempt: 1, State: drivers.StateExited, ExitCode: 137, OOMKilled: true}, 1, restartWait},
		{"on-failure spent", dw(onFailure2), exited(3), 2, restartNone},
		{"on-failure unbounded", dw(&protocol.RestartPolicy{Policy: protocol.RestartOnFailure}), exited(1), 500, restartWait},
		{"always after success", dw(&protocol.RestartPolicy{Policy: protocol.RestartAlways}), exited(0), 7, restartWait},
		{"running", dw(onFailure2), drivers.Instance{Workload: "w", Attempt: 1, State: drivers.StateRunning}, 0, restartNone},
		{"stopped", dw(onFailure2), drivers.Instance{Workload: "w", Attempt: 1, State: drivers.StateStopped}, 0, restartNone},
		{"older attempt", dw(onFailure2), drivers.Instance{Workload: "w", Attempt: 0, State: drivers.StateExited, ExitCode: 1}, 0, restartNone},
	}
	for _, tt := range tests {
		var b restartBook
		got, _ := b.decide(clk, base, limit, tt.dw, tt.in, true, tt.count)
		if got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}

	// The wait: due after the backoff for the count, from the first pass
	// that saw the exit.
	var b restartBook
	d := dw(onFailure2)
	if got, at := b.decide(clk, base, limit, d, exited(3), true, 1); got != restartWait || !at.Equal(clk.Now().Add(2*time.Second)) {
		t.Fatalf("first look: %d at %s", got, at)
	}
	clk.Advance(1999 * time.Millisecond)
	if got, _ := b.decide(clk, base, limit, d, exited(3), true, 1); got != restartWait {
		t.Fatalf("before the backoff: got %d, want wait", got)
	}
	clk.Advance(time.Millisecond)
	if got, _ := b.decide(clk, base, limit, d, exited(3), true, 1); got != restartNow {
		t.Fatalf("after the backoff: got %d, want now", got)
	}
	// Once restarted the wait is forgotten: the next exit waits afresh.
	if got, _ := b.decide(clk, base, limit, d, exited(3), true, 2); got != restartNone {
		t.Fatalf("spent: got %d, want none", got)
	}
}

// TestRestartOnFailure: a workload that exits non-zero under on-failure:2
// is restarted twice by the agent, each restart counted on its status,
// then reported as exited.
func TestRestartOnFailure(t *testing.T) {
	f := newFakeHub()
	h := startAgent(t, t.TempDir(), f, func(c *Config) { c.RestartBackoff = 10 * time.Millisecond })
	w := run("w-1", 1)
	w.Image = "sim:exit-after=30ms,exit-code=3"
	w.Restart = &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, Max: 2}
	f.set(w)
	s := waitCode(t, f, "w-1", protocol.CodeExited)
	if s.Restarts != 2 || s.ExitCode == nil || *s.ExitCode != 3 {
		t.Errorf("final status: restarts %d, exit code %v; want 2 and 3", s.Restarts, s.ExitCode)
	}
	if n, _ := h.sim.Starts("w-1"); n != 3 {
		t.Errorf("got %d starts, want 3", n)
	}
	// The count never goes down within the attempt, and the hub saw a
	// restart under way.
	f.mu.Lock()
	last, sawRestarting := 0, false
	for _, req := range f.reqs {
		for _, st := range req.Statuses {
			if st.Workload != "w-1" {
				continue
			}
			if st.Restarts < last {
				t.Errorf("restarts went from %d to %d", last, st.Restarts)
			}
			last = st.Restarts
			sawRestarting = sawRestarting || (st.Restarts > 0 && st.Code != protocol.CodeExited)
		}
	}
	f.mu.Unlock()
	if !sawRestarting {
		t.Error("no status showed a restart under way")
	}

	// A new attempt starts its count afresh.
	w.Attempt = 2
	w.Image = "sim:"
	f.set(w)
	s = waitCode(t, f, "w-1", protocol.CodeRunning)
	if s.Restarts != 0 || s.Attempt != 2 {
		t.Errorf("new attempt: got restarts %d attempt %d", s.Restarts, s.Attempt)
	}
}

// TestNoRestartPolicy: without a policy an exit ends the attempt, as
// before.
func TestNoRestartPolicy(t *testing.T) {
	f := newFakeHub()
	h := startAgent(t, t.TempDir(), f, func(c *Config) { c.RestartBackoff = time.Millisecond })
	w := run("w-1", 1)
	w.Image = "sim:exit-after=10ms,exit-code=3"
	f.set(w)
	waitCode(t, f, "w-1", protocol.CodeExited)
	time.Sleep(100 * time.Millisecond)
	if n, _ := h.sim.Starts("w-1"); n != 1 {
		t.Errorf("got %d starts, want 1", n)
	}
}

// TestRestartDueIsKnownToTheApplyLoop: the apply loop waits no longer than
// the earliest waiting restart (restartBook.next), so a restart happens
// when its backoff ends even where the periodic pass is 30 s (every driver
// notifying changes, as Docker does).
func TestRestartDueIsKnownToTheApplyLoop(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var b restartBook
	if !b.next().IsZero() {
		t.Fatal("due with nothing waiting")
	}
	pol := &protocol.RestartPolicy{Policy: protocol.RestartAlways}
	dw := func(id string) protocol.DesiredWorkload {
		return protocol.DesiredWorkload{ID: id, Attempt: 1, WorkloadSpec: protocol.WorkloadSpec{Restart: pol}}
	}
	exited := func(id string) drivers.Instance {
		return drivers.Instance{Workload: id, Attempt: 1, State: drivers.StateExited, ExitCode: 1}
	}
	start := clk.Now()
	if d, _ := b.decide(clk, time.Second, time.Minute, dw("a"), exited("a"), true, 0); d != restartWait {
		t.Fatalf("a: %v", d)
	}
	if d, _ := b.decide(clk, time.Second, time.Minute, dw("b"), exited("b"), true, 3); d != restartWait {
		t.Fatalf("b: %v", d)
	}
	if got := b.next(); !got.Equal(start.Add(backoff(time.Second, time.Minute, 0))) {
		t.Errorf("next %s, want a's due", got.Sub(start))
	}
	clk.Advance(backoff(time.Second, time.Minute, 0))
	if d, _ := b.decide(clk, time.Second, time.Minute, dw("a"), exited("a"), true, 0); d != restartNow {
		t.Fatalf("a after its backoff: %v", d)
	}
	if got := b.next(); !got.Equal(start.Add(backoff(time.Second, time.Minute, 3))) {
		t.Errorf("next %s, want b's due", got.Sub(start))
	}
	b.decide(clk, time.Second, time.Minute, dw("b"), drivers.Instance{Workload: "b", Attempt: 1, State: drivers.StateRunning}, true, 3)
	if !b.next().IsZero() {
		t.Error("due after b runs again")
	}
}
