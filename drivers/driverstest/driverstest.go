// Package driverstest is the conformance suite of drivers.Driver: every
// driver's tests call Run, so each keeps the promises the agent's apply
// loop relies on.
package driverstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/protocol"
)

// Options adapt the suite to one driver. Image is required; every hook is
// optional and its checks are skipped without it.
type Options struct {
	// Image runs until it is stopped.
	Image string
	// Kind and Resources go into every Spec; Kind defaults to container.
	Kind      protocol.Kind
	Resources protocol.Resources

	// ExitImage exits by itself with ExitCode soon after it starts.
	ExitImage string
	ExitCode  int
	// MissingImage cannot be had: Start must end in StateFailed with
	// protocol.CodeImageUnavailable.
	MissingImage string

	// WriteData writes a file called name, holding content, into the
	// workload's data; ReadData reads it back (ok false when absent).
	// Both run while the instance is running or stopped.
	WriteData func(t *testing.T, workload, name, content string)
	ReadData  func(t *testing.T, workload, name string) (content string, ok bool)
	// InstanceID returns what identifies the workload's instance in the
	// runtime (a container ID), "" when there is none.
	InstanceID func(t *testing.T, workload string) string
	// Foreign makes, where the driver would put workload's instance,
	// something the driver did not make (an unlabelled container of the
	// same name). intact reports whether it is still there, unchanged.
	Foreign func(t *testing.T, workload string) (intact func() bool)

	// Timeout bounds each wait for a state; default 30s.
	Timeout time.Duration
	// Poll, if set, runs between two looks at List, e.g. to advance a
	// fake clock.
	Poll func()
	// Prefix begins every workload ID the suite uses; default a random
	// one per Run, so parallel runs do not collide.
	Prefix string
}

// Run runs the suite. newDriver returns a driver over the same machine
// state each time it is called during one Run: a second call plays an
// agent restart (the suite closes the first driver if it has a Close
// method). newDriver registers any cleanup of its own.
func Run(t *testing.T, newDriver func(t *testing.T) drivers.Driver, opts Options) {
	t.Helper()
	if opts.Image == "" {
		t.Fatal("driverstest: Options.Image is required")
	}
	if opts.Kind == "" {
		opts.Kind = protocol.KindContainer
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Prefix == "" {
		opts.Prefix = "conf-" + randomHex(4) + "-"
	}
	data := opts.WriteData != nil && opts.ReadData != nil

	tests := []struct {
		name string
		skip string // why the test cannot run with these options
		run  func(t *testing.T, h *harness)
	}{
		{name: "start_runs_the_workload", run: testStartRuns},
		{name: "start_again_is_a_no_op", run: testStartAgain},
		{name: "start_on_running_records_the_new_attempt", run: testNewAttemptWhileRunning},
		{name: "stop_keeps_instance_and_data", run: testStop},
		{name: "start_after_stop_restarts_the_same_instance", run: testRestart},
		{name: "remove_deletes_instance_and_data", run: testRemove},
		{name: "stop_and_remove_of_a_missing_workload_succeed", run: testMissing},
		{name: "driver_restart_loses_nothing_and_duplicates_nothing", run: testDriverRestart},
		{name: "stopped_stays_stopped_across_driver_restart", run: testStoppedAcrossRestart},
		{name: "list_shows_only_owned_instances", run: testOnlyOwned,
			skip: skipUnless(opts.Foreign != nil, "Options.Foreign")},
		{name: "exit_is_reported_with_its_code", run: testExit,
			skip: skipUnless(opts.ExitImage != "", "Options.ExitImage")},
		{name: "missing_image_fails_with_image_unavailable", run: testMissingImage,
			skip: skipUnless(opts.MissingImage != "", "Options.MissingImage")},
		{name: "data_survives_stop_and_start", run: testData,
			skip: skipUnless(data, "Options.WriteData and ReadData")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.skip != "" {
				t.Skip(tt.skip)
			}
			h := &harness{opts: opts, newDriver: newDriver, t: t}
			h.open(t)
			tt.run(t, h)
		})
	}
}

func skipUnless(ok bool, what string) string {
	if ok {
		return ""
	}
	return "needs " + what
}

// harness holds the driver under test, which a restart replaces.
type harness struct {
	opts      Options
	newDriver func(t *testing.T) drivers.Driver
	t         *testing.T
	d         drivers.Driver
	workloads []string
}

// workload returns a fresh workload ID, removed when the test ends.
func (h *harness) workload() string {
	w := fmt.Sprintf("%s%s-%d", h.opts.Prefix, randomHex(3), len(h.workloads)+1)
	h.workloads = append(h.workloads, w)
	return w
}

// open makes the driver under test, with a cleanup that removes the
// test's workloads while that driver is still open and current.
func (h *harness) open(t *testing.T) {
	d := h.newDriver(t)
	h.d = d
	t.Cleanup(func() {
		if h.d != d {
			return // replaced by a restart; the new one cleans up
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
		defer cancel()
		for _, w := range h.workloads {
			if err := d.Remove(ctx, w); err != nil {
				t.Errorf("cleanup: Remove(%s): %v", w, err)
			}
		}
	})
}

func (h *harness) spec(w string, attempt int64) drivers.Spec {
	return drivers.Spec{Workload: w, Attempt: attempt, Kind: h.opts.Kind, Image: h.opts.Image, Resources: h.opts.Resources}
}

func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
	h.t.Cleanup(cancel)
	return ctx
}

func (h *harness) start(t *testing.T, spec drivers.Spec) {
	t.Helper()
	if err := h.d.Start(h.ctx(), spec); err != nil {
		t.Fatalf("Start(%s, attempt %d): %v", spec.Workload, spec.Attempt, err)
	}
}

func (h *harness) stop(t *testing.T, w string) {
	t.Helper()
	if err := h.d.Stop(h.ctx(), w); err != nil {
		t.Fatalf("Stop(%s): %v", w, err)
	}
}

func (h *harness) remove(t *testing.T, w string) {
	t.Helper()
	if err := h.d.Remove(h.ctx(), w); err != nil {
		t.Fatalf("Remove(%s): %v", w, err)
	}
}

// find lists and returns w's instance, failing if it is listed twice.
func (h *harness) find(t *testing.T, w string) (drivers.Instance, bool) {
	t.Helper()
	list, err := h.d.List(h.ctx())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var got []drivers.Instance
	for _, inst := range list {
		if inst.Workload == w {
			got = append(got, inst)
		}
	}
	if len(got) > 1 {
		t.Fatalf("List: got %d instances of %s, want at most 1: %+v", len(got), w, got)
	}
	if len(got) == 0 {
		return drivers.Instance{}, false
	}
	return got[0], true
}

// waitFor polls List until ok holds for w's instance, failing at the
// deadline.
func (h *harness) waitFor(t *testing.T, w, what string, ok func(inst drivers.Instance, found bool) bool) drivers.Instance {
	t.Helper()
	deadline := time.Now().Add(h.opts.Timeout)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		inst, found := h.find(t, w)
		if ok(inst, found) {
			return inst
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: waited %v for %s; last: found %v, %+v", w, h.opts.Timeout, what, found, inst)
		}
		if h.opts.Poll != nil {
			h.opts.Poll()
		}
		<-tick.C
	}
}

// waitState waits for w to be listed in state, failing early when it
// reaches another settled state instead.
func (h *harness) waitState(t *testing.T, w string, state drivers.State) drivers.Instance {
	t.Helper()
	return h.waitFor(t, w, string(state), func(inst drivers.Instance, found bool) bool {
		if found && inst.State != state && settled(inst.State) && settled(state) {
			t.Fatalf("%s: got state %s (code %q, detail %q), want %s", w, inst.State, inst.Code, inst.Detail, state)
		}
		return found && inst.State == state
	})
}

// settled states do not change without a call to the driver.
func settled(s drivers.State) bool {
	return s == drivers.StateStopped || s == drivers.StateFailed
}

func (h *harness) waitGone(t *testing.T, w string) {
	t.Helper()
	h.waitFor(t, w, "it to be unlisted", func(_ drivers.Instance, found bool) bool { return !found })
}

func (h *harness) instanceID(t *testing.T, w string) string {
	t.Helper()
	if h.opts.InstanceID == nil {
		return ""
	}
	return h.opts.InstanceID(t, w)
}

// sameInstance checks that w's instance is still the one called want.
func (h *harness) sameInstance(t *testing.T, w, want string) {
	t.Helper()
	if h.opts.InstanceID == nil {
		return
	}
	if got := h.opts.InstanceID(t, w); got != want {
		t.Errorf("%s: got instance %q, want the same instance %q", w, got, want)
	}
}

func checkAttempt(t *testing.T, inst drivers.Instance, want int64) {
	t.Helper()
	if inst.Attempt != want {
		t.Errorf("%s: got attempt %d, want %d", inst.Workload, inst.Attempt, want)
	}
}

// restart replaces the driver by a new one over the same state.
func (h *harness) restart(t *testing.T) {
	t.Helper()
	switch c := h.d.(type) {
	case interface{ Close() error }:
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	case interface{ Close() }:
		c.Close()
	}
	h.open(t)
}

func testStartRuns(t *testing.T, h *harness) {
	w := h.workload()
	h.start(t, h.spec(w, 1))
	inst := h.waitState(t, w, drivers.StateRunning)
	checkAttempt(t, inst, 1)
	if !inst.Active() {
		t.Errorf("%s: got Active() false for a running instance, want true", w)
	}
	if inst.Code == protocol.CodeFailedStart || inst.Code == protocol.CodeImageUnavailable {
		t.Errorf("%s: got code %q on a running instance, want none", w, inst.Code)
	}
}

func testStartAgain(t *testing.T, h *harness) {
	w := h.workload()
	h.start(t, h.spec(w, 1))
	h.waitState(t, w, drivers.StateRunning)
	id := h.instanceID(t, w)
	h.start(t, h.spec(w, 1))
	inst := h.waitState(t, w, drivers.StateRunning)
	checkAttempt(t, inst, 1)
	h.sameInstance(t, w, id)
}

func testNewAttemptWhileRunning(t *testing.T, h *harness) {
	w := h.workload()
	h.start(t, h.spec(w, 1))
	h.waitState(t, w, drivers.StateRunning)
	id := h.instanceID(t, w)
	h.start(t, h.spec(w, 2))
	inst, found := h.find(t, w)
	if !found {
		t.Fatalf("%s: not listed after a second Start", w)
	}
	if inst.State != drivers.StateRunning {
		t.Errorf("%s: got state %s after Start on a running instance, want running", w, inst.State)
	}
	checkAttempt(t, inst, 2)
	h.sameInstance(t, w, id)
}

func testStop(t *testing.T, h *harness) {
	w := h.workload()
	h.start(t, h.spec(w, 1))
	h.waitState(t, w, drivers.StateRunning)
	id := h.instanceID(t, w)
	h.stop(t, w)
	inst := h.waitState(t, w, drivers.StateStopped)
	checkAttempt(t, inst, 1)
	if inst.Active() {
		t.Errorf("%s: got Active() true for a stopped instance, want false", w)
	}
	h.sameInstance(t, w, id)
	// Stopping again is harmless.
	h.stop(t, w)
	h.waitState(t, w, drivers.StateStopped)
}

func testRestart(t *testing.T, h *harness) {
	w := h.workload()
	h.start(t, h.spec(w, 1))
	h.waitState(t, w, drivers.StateRunning)
	id := h.instanceID(t, w)
	h.stop(t, w)
	h.waitState(t, w, drivers.StateStopped)
	h.start(t, h.spec(w, 2))
	inst := h.waitState(t, w, drivers.StateRunning)
	checkAttempt(t, inst, 2)
	h.sameInstance(t, w, id)
}

func testRemove(t *testing.T, h *harness) {
	w := h.workload()
	h.start(t, h.spec(w, 1))
	h.waitState(t, w, drivers.StateRunning)
	if h.opts.WriteData != nil {
		h.opts.WriteData(t, w, "kept", "before remove")
	}
	h.remove(t, w)
	h.waitGone(t, w)
	if id := h.instanceID(t, w); id != "" {
		t.Errorf("%s: got instance %q after Remove, want none", w, id)
	}
	// Removing again is harmless.
	h.remove(t, w)
	// A new start begins afresh, without the old data.
	h.start(t, h.spec(w, 2))
	inst := h.waitState(t, w, drivers.StateRunning)
	checkAttempt(t, inst, 2)
	if h.opts.ReadData != nil {
		if got, ok := h.opts.ReadData(t, w, "kept"); ok {
			t.Errorf("%s: got data %q after Remove and Start, want none", w, got)
		}
	}
}

func testMissing(t *testing.T, h *harness) {
	w := h.workload()
	if err := h.d.Stop(h.ctx(), w); err != nil {
		t.Errorf("Stop of a missing workload: got %v, want nil", err)
	}
	if err := h.d.Remove(h.ctx(), w); err != nil {
		t.Errorf("Remove of a missing workload: got %v, want nil", err)
	}
	if _, found := h.find(t, w); found {
		t.Errorf("%s: listed after Stop and Remove of a missing workload, want unlisted", w)
	}
}

func testDriverRestart(t *testing.T, h *harness) {
	w := h.workload()
	h.start(t, h.spec(w, 1))
	h.waitState(t, w, drivers.StateRunning)
	// A new attempt recorded on a running instance must survive too.
	h.start(t, h.spec(w, 2))
	id := h.instanceID(t, w)
	h.restart(t)
	inst := h.waitState(t, w, drivers.StateRunning)
	checkAttempt(t, inst, 2)
	h.sameInstance(t, w, id)
	// The agent's first pass after a restart starts what should run.
	h.start(t, h.spec(w, 2))
	inst = h.waitState(t, w, drivers.StateRunning)
	checkAttempt(t, inst, 2)
	h.sameInstance(t, w, id)
}

func testStoppedAcrossRestart(t *testing.T, h *harness) {
	w := h.workload()
	h.start(t, h.spec(w, 1))
	h.waitState(t, w, drivers.StateRunning)
	h.stop(t, w)
	h.waitState(t, w, drivers.StateStopped)
	h.restart(t)
	inst, found := h.find(t, w)
	if !found {
		t.Fatalf("%s: not listed after a driver restart", w)
	}
	if inst.State != drivers.StateStopped {
		t.Errorf("%s: got state %s after a driver restart, want stopped", w, inst.State)
	}
	checkAttempt(t, inst, 1)
}

func testOnlyOwned(t *testing.T, h *harness) {
	w := h.workload()
	intact := h.opts.Foreign(t, w)
	if _, found := h.find(t, w); found {
		t.Errorf("%s: foreign instance listed, want unlisted", w)
	}
	if err := h.d.Stop(h.ctx(), w); err != nil {
		t.Errorf("Stop of a foreign instance: got %v, want nil", err)
	}
	if err := h.d.Remove(h.ctx(), w); err != nil {
		t.Errorf("Remove of a foreign instance: got %v, want nil", err)
	}
	if !intact() {
		t.Errorf("%s: foreign instance changed by Stop or Remove, want untouched", w)
	}
	if _, found := h.find(t, w); found {
		t.Errorf("%s: foreign instance listed after Stop and Remove, want unlisted", w)
	}
}

func testExit(t *testing.T, h *harness) {
	w := h.workload()
	spec := h.spec(w, 1)
	spec.Image = h.opts.ExitImage
	h.start(t, spec)
	inst := h.waitFor(t, w, "exited", func(inst drivers.Instance, found bool) bool {
		return found && inst.State == drivers.StateExited
	})
	if inst.ExitCode != h.opts.ExitCode {
		t.Errorf("%s: got exit code %d, want %d", w, inst.ExitCode, h.opts.ExitCode)
	}
	if inst.OOMKilled {
		t.Errorf("%s: got OOMKilled true, want false", w)
	}
	checkAttempt(t, inst, 1)
	id := h.instanceID(t, w)
	// Start after an exit runs the same instance again for the new attempt.
	spec.Attempt = 2
	h.start(t, spec)
	inst = h.waitFor(t, w, "attempt 2 to have run", func(inst drivers.Instance, found bool) bool {
		return found && inst.Attempt == 2 && (inst.State == drivers.StateRunning || inst.State == drivers.StateExited)
	})
	h.sameInstance(t, w, id)
}

func testMissingImage(t *testing.T, h *harness) {
	w := h.workload()
	spec := h.spec(w, 1)
	spec.Image = h.opts.MissingImage
	err := h.d.Start(h.ctx(), spec)
	if err != nil && errors.Is(err, drivers.ErrUnavailable) {
		t.Fatalf("Start with a missing image: got %v, want no driver_unavailable", err)
	}
	inst := h.waitFor(t, w, "failed", func(inst drivers.Instance, found bool) bool {
		return found && inst.State == drivers.StateFailed
	})
	if inst.Code != protocol.CodeImageUnavailable {
		t.Errorf("%s: got code %q, want %q", w, inst.Code, protocol.CodeImageUnavailable)
	}
	checkAttempt(t, inst, 1)
	if inst.Active() {
		t.Errorf("%s: got Active() true for a failed instance, want false", w)
	}
	h.remove(t, w)
	h.waitGone(t, w)
}

func testData(t *testing.T, h *harness) {
	w := h.workload()
	h.start(t, h.spec(w, 1))
	h.waitState(t, w, drivers.StateRunning)
	h.opts.WriteData(t, w, "note", "kept across stop")
	h.stop(t, w)
	h.waitState(t, w, drivers.StateStopped)
	if got, ok := h.opts.ReadData(t, w, "note"); !ok || got != "kept across stop" {
		t.Errorf("%s: while stopped: got data %q (present %v), want %q", w, got, ok, "kept across stop")
	}
	h.start(t, h.spec(w, 2))
	h.waitState(t, w, drivers.StateRunning)
	if got, ok := h.opts.ReadData(t, w, "note"); !ok || got != "kept across stop" {
		t.Errorf("%s: after restart: got data %q (present %v), want %q", w, got, ok, "kept across stop")
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
