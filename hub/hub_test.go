package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

var epoch = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

type testHub struct {
	*Hub
	t    *testing.T
	clk  *clock.Fake
	path string
	st   *sqlite.Store
}

func newTestHub(t *testing.T) *testHub {
	t.Helper()
	return openTestHub(t, filepath.Join(t.TempDir(), "hub.db"), clock.NewFake(epoch))
}

func openTestHub(t *testing.T, path string, clk *clock.Fake) *testHub {
	t.Helper()
	return openTestHubAs(t, path, clk, "")
}

// openTestHubAs opens a hub whose lease holder is holder ("" makes one, as
// a hub process does).
func openTestHubAs(t *testing.T, path string, clk *clock.Fake, holder string) *testHub {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h, err := New(context.Background(), Config{AllowSim: true, Store: st, Clock: clk, HolderID: holder, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return &testHub{Hub: h, t: t, clk: clk, path: path, st: st}
}

func testInventory() *protocol.Inventory {
	return &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 32768, Drivers: []string{"sim"}, Features: protocol.AgentFeatures}
}

// machine registers a machine of tenant local in region local and sends
// its first inventory.
func (h *testHub) machine(id string) {
	h.t.Helper()
	ctx := context.Background()
	if err := h.EnsureTenant(ctx, "local"); err != nil {
		h.t.Fatal(err)
	}
	if err := h.RegisterMachine(ctx, id, id, "local", "local"); err != nil {
		h.t.Fatal(err)
	}
	h.sync(id, &protocol.SyncRequest{ProtocolVersion: protocol.Version, Inventory: testInventory()})
}

// sync makes a sync that must answer at once.
func (h *testHub) sync(id string, req *protocol.SyncRequest) *protocol.SyncResponse {
	h.t.Helper()
	if req.ProtocolVersion == 0 {
		req.ProtocolVersion = protocol.Version
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := h.Sync(ctx, id, req)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp
}

// report sends statuses as an agent that has applied desired state resp.
func (h *testHub) report(id string, resp *protocol.SyncResponse, statuses ...protocol.Status) {
	h.t.Helper()
	for i := range statuses {
		if statuses[i].Generation == 0 {
			statuses[i].Generation = resp.Generation
		}
	}
	// An agent naming no store is answered at once.
	h.sync(id, &protocol.SyncRequest{Generation: resp.Generation, AppliedGeneration: resp.Generation, Statuses: statuses})
	h.pass()
}

func (h *testHub) pass() {
	h.t.Helper()
	if err := h.Pass(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func (h *testHub) create(name string, kind protocol.Kind) store.Workload {
	h.t.Helper()
	w, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: name, Kind: kind, Class: "cpu-1", Region: "local", Image: "sim:"})
	if err != nil {
		h.t.Fatal(err)
	}
	return w
}

func (h *testHub) workload(id string) store.Workload {
	h.t.Helper()
	w, err := h.Workload(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return w
}

func (h *testHub) desired(id string) *protocol.SyncResponse {
	h.t.Helper()
	resp, err := h.Desired(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp
}

func status(w store.Workload, mode protocol.Mode, code protocol.Code) protocol.Status {
	return protocol.Status{Workload: w.ID, Attempt: w.Attempt, Mode: mode, Code: code}
}

func wantState(t *testing.T, h *testHub, id string, want store.State) store.Workload {
	t.Helper()
	w := h.workload(id)
	if w.State != want {
		t.Fatalf("workload %s: got state %s (%s), want %s", id, w.State, w.Reason, want)
	}
	return w
}

func TestLifecycle(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	w := h.create("web", protocol.KindContainer)
	h.pass()
	w = wantState(t, h, w.ID, store.StateProvisioning)
	if w.Machine != "m-1" || w.Driver != "sim" || w.Attempt != 1 {
		t.Fatalf("placed as %s/%s attempt %d, want m-1/sim attempt 1", w.Machine, w.Driver, w.Attempt)
	}
	d := h.desired("m-1")
	if len(d.Workloads) != 1 || d.Workloads[0].Mode != protocol.ModeRun {
		t.Fatalf("desired: got %+v", d.Workloads)
	}

	h.report("m-1", d, status(w, protocol.ModeRun, protocol.CodeRunning))
	wantState(t, h, w.ID, store.StateRunning)

	if err := h.ParkWorkload(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	w = wantState(t, h, w.ID, store.StateStopping)
	d2 := h.desired("m-1")
	if d2.Generation <= d.Generation || d2.Workloads[0].Mode != protocol.ModePark {
		t.Fatalf("after park: generation %d→%d, mode %s", d.Generation, d2.Generation, d2.Workloads[0].Mode)
	}
	h.report("m-1", d2, status(w, protocol.ModePark, protocol.CodeStopped))
	wantState(t, h, w.ID, store.StateStopped)

	if err := h.RunWorkload(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	h.pass()
	w = wantState(t, h, w.ID, store.StateProvisioning)
	if w.Attempt != 2 || w.Machine != "m-1" {
		t.Fatalf("run again: attempt %d on %s, want attempt 2 on m-1", w.Attempt, w.Machine)
	}

	if err := h.DeleteWorkload(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	w = wantState(t, h, w.ID, store.StateDeleting)
	d3 := h.desired("m-1")
	if d3.Workloads[0].Mode != protocol.ModeRemove {
		t.Fatalf("after rm: mode %s, want remove", d3.Workloads[0].Mode)
	}
	h.report("m-1", d3, status(w, protocol.ModeRemove, protocol.CodeRemoved))
	if _, err := h.Workload(context.Background(), w.ID); err == nil {
		t.Fatal("workload still there after its removal was reported")
	}
	if got := h.desired("m-1").Workloads; len(got) != 0 {
		t.Errorf("desired after removal: got %+v, want none", got)
	}
}

func TestPlacementRecordsClassMachineDriverOnTimeline(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	w := h.create("web", protocol.KindContainer)
	h.pass()
	es, err := h.Timeline(context.Background(), w.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := "placed on machine m-1 with driver sim as class cpu-1 (attempt 1)"
	for _, e := range es {
		if e.Text == want {
			return
		}
	}
	t.Errorf("timeline %+v lacks %q", es, want)
}

// Rule 1: desired state is computed from the store at every sync; a
// restarted hub answers exactly what the old one would.
func TestRule1_RestartedHubAnswersTheSameDesiredState(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	h.create("a", protocol.KindContainer)
	b := h.create("b", protocol.KindVM)
	h.pass()
	if err := h.ParkWorkload(context.Background(), b.ID); err != nil {
		t.Fatal(err)
	}
	before := h.desired("m-1")
	h.st.Close()

	h2 := openTestHub(t, h.path, h.clk)
	after := h2.desired("m-1")
	if after.StoreID != before.StoreID || after.Generation != before.Generation || len(after.Workloads) != len(before.Workloads) {
		t.Fatalf("after restart: got %+v, want %+v", after, before)
	}
	for i := range before.Workloads {
		if after.Workloads[i].ID != before.Workloads[i].ID || after.Workloads[i].Mode != before.Workloads[i].Mode {
			t.Errorf("workload %d: got %+v, want %+v", i, after.Workloads[i], before.Workloads[i])
		}
	}
}

// Rule 2: the mode of every state.
func TestRule2_ModeOfEveryState(t *testing.T) {
	tests := []struct {
		state store.State
		kind  protocol.Kind
		want  protocol.Mode
	}{
		{store.StateProvisioning, protocol.KindContainer, protocol.ModeRun},
		{store.StateRunning, protocol.KindVM, protocol.ModeRun},
		{store.StatePending, protocol.KindContainer, protocol.ModePark},
		{store.StateQueued, protocol.KindNotebook, protocol.ModePark},
		{store.StateStopping, protocol.KindVM, protocol.ModePark},
		{store.StateStopped, protocol.KindContainer, protocol.ModePark},
		{store.StateFailed, protocol.KindContainer, protocol.ModePark},
		{store.StateDeleting, protocol.KindContainer, protocol.ModeRemove},
		{store.StateStopped, protocol.KindEndpoint, protocol.ModeRemove},
		{store.StateFailed, protocol.KindEndpoint, protocol.ModeRemove},
		{store.StateRunning, protocol.KindEndpoint, protocol.ModeRun},
	}
	for _, tt := range tests {
		t.Run(string(tt.state)+"_"+string(tt.kind), func(t *testing.T) {
			got, listed := modeOf(store.Workload{State: tt.state, Kind: tt.kind, Machine: "m-1"})
			if !listed || got != tt.want {
				t.Errorf("got %s (listed %v), want %s", got, listed, tt.want)
			}
		})
	}
	if _, listed := modeOf(store.Workload{State: store.StatePending}); listed {
		t.Error("a workload on no machine is listed")
	}
	for _, s := range store.States {
		if _, listed := modeOf(store.Workload{State: s, Machine: "m-1"}); !listed {
			t.Errorf("state %s has no mode", s)
		}
	}
}

// Rule 7: a status answers only the attempt and mode the store expects,
// applied from a desired state at least as new as the one that set it.
func TestRule7_OlderAttemptModeOrGenerationChangesNothing(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(s *protocol.Status, d *protocol.SyncResponse)
		want   store.State
	}{
		{"matching_status", func(*protocol.Status, *protocol.SyncResponse) {}, store.StateFailed},
		{"older_attempt", func(s *protocol.Status, _ *protocol.SyncResponse) { s.Attempt-- }, store.StateProvisioning},
		{"other_mode", func(s *protocol.Status, _ *protocol.SyncResponse) { s.Mode = protocol.ModePark }, store.StateProvisioning},
		{"older_generation", func(s *protocol.Status, d *protocol.SyncResponse) { s.Generation = d.Generation - 1 }, store.StateProvisioning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestHub(t)
			h.machine("m-1")
			w := h.create("web", protocol.KindContainer)
			h.pass()
			if err := h.ParkWorkload(context.Background(), w.ID); err != nil {
				t.Fatal(err)
			}
			if err := h.RunWorkload(context.Background(), w.ID); err != nil {
				t.Fatal(err)
			}
			h.pass()
			w = wantState(t, h, w.ID, store.StateProvisioning)
			d := h.desired("m-1")
			s := status(w, protocol.ModeRun, protocol.CodeFailedStart)
			s.Generation = d.Generation
			tt.mutate(&s, d)
			h.report("m-1", d, s)
			wantState(t, h, w.ID, tt.want)
		})
	}
}

func TestFailureReasonsAreFixed(t *testing.T) {
	exit := 3
	tests := []struct {
		name   string
		status protocol.Status
		want   string
	}{
		{"exited", protocol.Status{Code: protocol.CodeExited, ExitCode: &exit}, "it exited with code 3"},
		{"oom", protocol.Status{Code: protocol.CodeOOMKilled}, "it ran out of memory and was stopped"},
		{"unknown_code", protocol.Status{Code: "segfault_in_the_matrix", Detail: "<script>alert(1)</script>"}, unknownReason},
		{"refused_isolation", protocol.Status{Code: protocol.CodeRefusedIsolation, Detail: "lies"}, "its machine's driver does not isolate it as strongly as it needs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestHub(t)
			h.machine("m-1")
			w := h.create("web", protocol.KindContainer)
			h.pass()
			w = h.workload(w.ID)
			s := tt.status
			s.Workload, s.Attempt, s.Mode = w.ID, w.Attempt, protocol.ModeRun
			h.report("m-1", h.desired("m-1"), s)
			got := wantState(t, h, w.ID, store.StateFailed)
			if got.Reason != tt.want {
				t.Errorf("got reason %q, want %q", got.Reason, tt.want)
			}
		})
	}
}

func TestStatusForAWorkloadOfAnotherMachineChangesNothing(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	h.machine("m-2")
	w := h.create("web", protocol.KindContainer)
	h.pass()
	w = h.workload(w.ID)
	other := "m-2"
	if w.Machine == "m-2" {
		other = "m-1"
	}
	h.report(other, h.desired(other), status(w, protocol.ModeRun, protocol.CodeFailedStart))
	wantState(t, h, w.ID, store.StateProvisioning)
}

func TestLongPollAnsweredOnChange(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	d := h.desired("m-1")
	got := make(chan *protocol.SyncResponse, 1)
	go func() {
		resp, err := h.Sync(context.Background(), "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: d.StoreID, Generation: d.Generation})
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	waitTimers(t, h.clk, 1)
	h.create("web", protocol.KindContainer)
	h.pass()
	// The fake clock never moved: only the wake can have answered.
	resp := <-got
	if resp.Unchanged || len(resp.Workloads) != 1 || resp.Generation <= d.Generation {
		t.Fatalf("got %+v, want the new desired state", resp)
	}
}

func TestLongPollAnsweredAtTimeoutWhenNothingChanges(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	d := h.desired("m-1")
	got := make(chan *protocol.SyncResponse, 1)
	go func() {
		resp, _ := h.Sync(context.Background(), "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: d.StoreID, Generation: d.Generation})
		got <- resp
	}()
	waitTimers(t, h.clk, 1)
	// The hold is jittered (polls.go): never under MinHoldFraction of
	// the timeout, never over it.
	h.clk.Advance(time.Duration(MinHoldFraction*float64(DefaultPollTimeout)) - time.Second)
	select {
	case resp := <-got:
		t.Fatalf("answered before the shortest hold: %+v", resp)
	default:
	}
	h.clk.Advance(DefaultPollTimeout)
	resp := <-got
	if !resp.Unchanged || len(resp.Workloads) != 0 {
		t.Fatalf("got %+v, want unchanged with nothing repeated", resp)
	}
}

func TestSyncAnswersAtOnceWhenAgentIsBehindOrStoreDiffers(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	h.create("web", protocol.KindContainer)
	h.pass()
	d := h.desired("m-1")
	for _, req := range []*protocol.SyncRequest{
		{StoreID: d.StoreID, Generation: d.Generation - 1},
		{StoreID: "st-other", Generation: d.Generation},
	} {
		if resp := h.sync("m-1", req); resp.Unchanged || len(resp.Workloads) != 1 {
			t.Errorf("request %+v: got %+v", req, resp)
		}
	}
}

// waitTimers waits until n timers are set on clk: a goroutine has reached
// its wait.
func waitTimers(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Timers() < n {
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine reached its wait")
		}
		time.Sleep(time.Millisecond)
	}
}

// Rule 8 (settling): after a restart nothing is admitted until the machines
// that were online before have reconnected, or OfflineAfter has passed.
func TestRule8_NothingAdmittedWhileSettling(t *testing.T) {
	for _, comesBack := range []bool{true, false} {
		t.Run(map[bool]string{true: "machine_reconnects", false: "machine_stays_away"}[comesBack], func(t *testing.T) {
			h := newTestHub(t)
			h.machine("m-1")
			h.st.Close()
			h.clk.Advance(time.Minute) // the hub was down; the machine had synced just before

			h2 := openTestHub(t, h.path, h.clk)
			h2.t = t
			w := h2.create("web", protocol.KindContainer)
			h2.pass()
			wantState(t, h2, w.ID, store.StatePending)

			if comesBack {
				h2.sync("m-1", &protocol.SyncRequest{})
				h2.pass()
				wantState(t, h2, w.ID, store.StateProvisioning)
				return
			}
			h2.clk.Advance(DefaultOfflineAfter)
			h2.pass()
			got := wantState(t, h2, w.ID, store.StateQueued)
			if got.Reason == "" {
				t.Error("queued without a reason")
			}
		})
	}
}

// Concurrent admit passes never place more than a machine holds: capacity
// is read and taken in one write transaction.
func TestNoOverCommitUnderConcurrentAdmits(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1") // 8 CPUs, 32 GB
	h.pass()         // take the lease
	for i := range 20 {
		if _, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: fmt.Sprintf("w%d", i),
			Kind: protocol.KindContainer, Class: "cpu-2", Region: "local"}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := h.ctl.admit(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	ws, _ := h.Workloads(context.Background())
	cpus := 0
	for _, w := range ws {
		if w.State == store.StateProvisioning {
			cpus += 2
		}
	}
	if cpus != 8 {
		t.Errorf("placed %d CPUs on a machine of 8, want exactly 8", cpus)
	}
}

// Desired state is cached under the machine's generation: a change that
// bumps it is served at once, and an answer within one generation reads
// one row.
func TestDesiredCachedPerGeneration(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	w := h.create("web", protocol.KindContainer)
	h.pass()
	first := h.desired("m-1")
	if err := h.CreateClass(context.Background(), store.Class{Name: "cpu-1", Accelerator: "none", CPUs: 3, MemoryMB: 2048}); err != nil {
		t.Fatal(err)
	}
	if got := h.desired("m-1"); got.Workloads[0].Resources.CPUs != first.Workloads[0].Resources.CPUs {
		t.Errorf("within one generation the answer changed: %+v", got.Workloads[0].Resources)
	}
	if err := h.ParkWorkload(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	got := h.desired("m-1")
	if got.Generation <= first.Generation || got.Workloads[0].Mode != protocol.ModePark || got.Workloads[0].Resources.CPUs != 3 {
		t.Errorf("after a change: got %+v, want the new generation, parked, 3 CPUs", got)
	}
}

// Issue 13: a machine's desired state is one read of its workloads with
// their classes' sizes (store.Tx.Listed), not of every class, nor a read
// of each class beside the workloads' records: a burst wakes every
// machine. Each workload is sized by its own class.
func TestDesiredStateIsOneRead(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	for i, class := range []string{"cpu-1", "cpu-2", "cpu-1"} {
		if _, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: fmt.Sprint("web-", i), Kind: protocol.KindContainer, Class: class, Region: "local", Image: "sim:"}); err != nil {
			t.Fatal(err)
		}
	}
	h.pass()
	counted := &callCountingStore{Store: h.st, calls: map[string]int{}}
	h.store = counted
	h.Hub.desired.Clear()
	resp, err := h.Desired(context.Background(), "m-1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"Listed": 1}
	if fmt.Sprint(counted.calls) != fmt.Sprint(want) {
		t.Errorf("a desired state of classes cpu-1 and cpu-2 read %v, want %v", counted.calls, want)
	}
	cpus := map[string]int{}
	for _, w := range resp.Workloads {
		cpus[w.ID] = w.Resources.CPUs
	}
	var ws []store.Workload
	err = h.st.View(context.Background(), func(tx store.Tx) (err error) { ws, err = tx.Workloads(store.WorkloadFilter{}); return err })
	if err != nil || len(ws) != 3 || len(resp.Workloads) != 3 {
		t.Fatalf("%d workloads, %d listed, %v; want 3", len(ws), len(resp.Workloads), err)
	}
	for _, w := range ws {
		if wantCPUs := map[string]int{"cpu-1": 1, "cpu-2": 2}[w.Class]; cpus[w.ID] != wantCPUs {
			t.Errorf("%s of class %s listed with %d CPUs, want %d", w.ID, w.Class, cpus[w.ID], wantCPUs)
		}
	}
}

func TestRemoveMachineOnlyWhenItHoldsNothing(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	w := h.create("web", protocol.KindContainer)
	h.pass()
	if err := h.RemoveMachine(context.Background(), "m-1"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("removing a machine that holds a workload: got %v, want ErrInvalid", err)
	}
	if err := h.DeleteWorkload(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	w = h.workload(w.ID)
	h.report("m-1", h.desired("m-1"), status(w, protocol.ModeRemove, protocol.CodeRemoved))
	if err := h.RemoveMachine(context.Background(), "m-1"); err != nil {
		t.Fatal(err)
	}
	// Forgotten, it may register again for another owner.
	if err := h.EnsureTenant(context.Background(), "globex"); err != nil {
		t.Fatal(err)
	}
	if err := h.RegisterMachine(context.Background(), "m-1", "m-1", "globex", "local"); err != nil {
		t.Errorf("registering the removed machine for another owner: %v", err)
	}
}

// TestSyncOfAMachineRemovedWhilePollingIsUnknown: a machine removed while
// its poll waits is answered as any unknown machine, so its agent is told
// to enrol again rather than that the hub failed.
func TestSyncOfAMachineRemovedWhilePollingIsUnknown(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	if err := h.RemoveMachine(context.Background(), "m-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Desired(context.Background(), "m-1"); !errors.Is(err, ErrUnknownMachine) {
		t.Errorf("desired state of a removed machine: got %v, want ErrUnknownMachine", err)
	}
}
