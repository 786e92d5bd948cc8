package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/sim"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// fakeHub is a hub reduced to its protocol: it holds one desired state and
// long-polls like the real one, with a short hold.
type fakeHub struct {
	mu      sync.Mutex
	desired protocol.SyncResponse
	reqs    []*protocol.SyncRequest
	wake    chan struct{}
	hold    time.Duration
	fail    error
}

func newFakeHub() *fakeHub {
	return &fakeHub{
		desired: protocol.SyncResponse{StoreID: "st-1", Generation: 1, Workloads: []protocol.DesiredWorkload{}},
		wake:    make(chan struct{}),
		hold:    50 * time.Millisecond,
	}
}

func (f *fakeHub) Sync(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	if f.fail != nil {
		err := f.fail
		f.mu.Unlock()
		return nil, err
	}
	if req.StoreID != f.desired.StoreID || req.Generation != f.desired.Generation {
		resp := f.desired
		f.mu.Unlock()
		return &resp, nil
	}
	wake, hold := f.wake, f.hold
	f.mu.Unlock()
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-wake:
		f.mu.Lock()
		resp := f.desired
		f.mu.Unlock()
		return &resp, nil
	case <-t.C:
		return &protocol.SyncResponse{StoreID: req.StoreID, Generation: req.Generation, Unchanged: true}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// set replaces the desired state with a new generation and wakes polls.
func (f *fakeHub) set(ws ...protocol.DesiredWorkload) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.desired.Generation++
	f.desired.Workloads = ws
	close(f.wake)
	f.wake = make(chan struct{})
}

// setRaw installs resp as is, e.g. an older generation or another store.
func (f *fakeHub) setRaw(resp protocol.SyncResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.desired = resp
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *fakeHub) syncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// status is the latest status the agent reported for workload.
func (f *fakeHub) status(workload string) (protocol.Status, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.reqs) - 1; i >= 0; i-- {
		for _, s := range f.reqs[i].Statuses {
			if s.Workload == workload {
				return s, true
			}
		}
		if len(f.reqs[i].Statuses) > 0 {
			return protocol.Status{}, false
		}
	}
	return protocol.Status{}, false
}

func (f *fakeHub) lastRequest() *protocol.SyncRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		return nil
	}
	return f.reqs[len(f.reqs)-1]
}

// waitFor polls cond until it holds or ten seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitCode(t *testing.T, f *fakeHub, workload string, code protocol.Code) protocol.Status {
	t.Helper()
	var s protocol.Status
	waitFor(t, fmt.Sprintf("%s to report %s", workload, code), func() bool {
		var ok bool
		s, ok = f.status(workload)
		return ok && s.Code == code
	})
	return s
}

type harness struct {
	t     *testing.T
	dir   string
	hub   *fakeHub
	sim   *sim.Driver
	agent *Agent
	stop  func()
}

type option func(*Config)

func startAgent(t *testing.T, dir string, f *fakeHub, opts ...option) *harness {
	t.Helper()
	d, err := sim.New(filepath.Join(dir, "sim"), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		StateDir: dir, Transport: f, Drivers: drivers.NewHost(d),
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		ApplyInterval: 20 * time.Millisecond, DriverTimeout: 5 * time.Second,
		Inventory: func(context.Context) protocol.Inventory {
			return protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 4, MemoryMB: 8192}
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx)
	}()
	h := &harness{t: t, dir: dir, hub: f, sim: d, agent: a}
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			d.Close()
			<-done
			a.Close()
		})
	}
	t.Cleanup(h.stop)
	return h
}

func run(id string, attempt int64) protocol.DesiredWorkload {
	return protocol.DesiredWorkload{ID: id, Attempt: attempt, Mode: protocol.ModeRun, Kind: protocol.KindContainer,
		Driver: "sim", Isolation: protocol.IsolationContainer, Image: "sim:",
		Resources: protocol.Resources{CPUs: 1, MemoryMB: 512}}
}

func withMode(w protocol.DesiredWorkload, m protocol.Mode) protocol.DesiredWorkload {
	w.Mode = m
	return w
}

func TestRunParkRunRemove(t *testing.T) {
	f := newFakeHub()
	h := startAgent(t, t.TempDir(), f)
	f.set(run("w-1", 1))
	waitCode(t, f, "w-1", protocol.CodeRunning)
	data := filepath.Join(h.sim.DataDir("w-1"), "file")
	if err := os.WriteFile(data, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}

	f.set(withMode(run("w-1", 1), protocol.ModePark))
	waitCode(t, f, "w-1", protocol.CodeStopped)
	if _, err := os.Stat(data); err != nil {
		t.Fatalf("data after park: %v", err)
	}

	f.set(run("w-1", 2))
	s := waitCode(t, f, "w-1", protocol.CodeRunning)
	if s.Attempt != 2 {
		t.Errorf("got attempt %d, want 2", s.Attempt)
	}
	if n, _ := h.sim.Starts("w-1"); n != 2 {
		t.Errorf("got %d starts, want 2", n)
	}

	f.set(withMode(run("w-1", 2), protocol.ModeRemove))
	waitCode(t, f, "w-1", protocol.CodeRemoved)
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data after remove: got %v, want it gone", err)
	}
}

// Rule 3: an agent deletes data only for workloads listed for removal; one
// it holds but is not told about is stopped and kept.
func TestRule3_UnlistedWorkloadStoppedAndKept(t *testing.T) {
	f := newFakeHub()
	h := startAgent(t, t.TempDir(), f)
	f.set(run("w-1", 1), run("w-2", 1))
	waitCode(t, f, "w-1", protocol.CodeRunning)
	waitCode(t, f, "w-2", protocol.CodeRunning)

	f.set(run("w-2", 1)) // w-1 left out
	waitCode(t, f, "w-1", protocol.CodeUnlisted)
	waitFor(t, "w-1 stopped", func() bool {
		list, _ := h.sim.List(context.Background())
		for _, in := range list {
			if in.Workload == "w-1" {
				return in.State == drivers.StateStopped
			}
		}
		return false
	})
	if _, err := os.Stat(h.sim.DataDir("w-1")); err != nil {
		t.Errorf("unlisted workload's data: %v", err)
	}
	if s, _ := f.status("w-2"); s.Code != protocol.CodeRunning {
		t.Errorf("w-2: got %s, want running", s.Code)
	}
}

// Rule 4: the machine is known by the ID saved next to the agent's state,
// not by its hostname: it survives restarts and is not derived from it.
func TestRule4_MachineIDSavedNextToState(t *testing.T) {
	dir := t.TempDir()
	f := newFakeHub()
	h := startAgent(t, dir, f)
	id := h.agent.MachineID()
	h.stop()
	b, err := os.ReadFile(filepath.Join(dir, machineIDFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != id {
		t.Errorf("saved id %q, agent said %q", got, id)
	}
	host, _ := os.Hostname()
	if strings.Contains(id, host) {
		t.Errorf("machine id %q contains the hostname", id)
	}
	h2 := startAgent(t, dir, f)
	if h2.agent.MachineID() != id {
		t.Errorf("after restart: got id %q, want %q", h2.agent.MachineID(), id)
	}
	if other := startAgent(t, t.TempDir(), f); other.agent.MachineID() == id {
		t.Error("two state directories share a machine id")
	}
}

// Rule 7: an attempt is recorded durably before it starts, so it starts at
// most once, also across agent restarts.
func TestRule7_AttemptStartsAtMostOnceAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	f := newFakeHub()
	h := startAgent(t, dir, f)
	f.set(protocol.DesiredWorkload{ID: "w-1", Attempt: 1, Mode: protocol.ModeRun, Kind: protocol.KindContainer,
		Driver: "sim", Image: "sim:exit-after=10ms,exit-code=3"})
	s := waitCode(t, f, "w-1", protocol.CodeExited)
	if s.ExitCode == nil || *s.ExitCode != 3 {
		t.Fatalf("got exit code %v, want 3", s.ExitCode)
	}
	h.stop()

	// The same desired state after a restart: the exited attempt is
	// reported, never started again.
	h = startAgent(t, dir, f)
	waitFor(t, "a sync after restart", func() bool { return len(f.lastRequest().Statuses) > 0 })
	waitCode(t, f, "w-1", protocol.CodeExited)
	if n, _ := h.sim.Starts("w-1"); n != 1 {
		t.Errorf("got %d starts, want 1", n)
	}
}

// Rule 7, the crash window: an attempt recorded but never handed to its
// driver (a crash between the two) is lost, not started late.
func TestRule7_RecordedButNeverStartedIsLost(t *testing.T) {
	dir := t.TempDir()
	st := &localState{Workloads: map[string]*held{"w-1": {Driver: "sim", StartedAttempt: 1}}}
	if err := saveState(dir, st); err != nil {
		t.Fatal(err)
	}
	f := newFakeHub()
	h := startAgent(t, dir, f)
	f.set(run("w-1", 1))
	waitCode(t, f, "w-1", protocol.CodeLost)
	if n, err := h.sim.Starts("w-1"); err == nil && n > 0 {
		t.Errorf("got %d starts, want none", n)
	}
}

func TestSecondAgentOnSameStateDirNamesHolder(t *testing.T) {
	dir := t.TempDir()
	startAgent(t, dir, newFakeHub())
	d, _ := sim.New(filepath.Join(dir, "sim"), clock.Real{})
	_, err := Open(Config{StateDir: dir, Transport: newFakeHub(), Drivers: drivers.NewHost(d)})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("got %v, want ErrLocked", err)
	}
	if want := fmt.Sprintf("process %d", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %q", err, want)
	}
}

// hangingDriver hangs in Start, ignoring its context, until released.
type hangingDriver struct {
	*sim.Driver
	release chan struct{}
}

func (d hangingDriver) Start(ctx context.Context, spec drivers.Spec) error {
	<-d.release
	// Released at the test's end: touch nothing, the state directory is
	// being removed.
	return errors.New("released")
}

func TestSyncContinuesWhileDriverCallHangs(t *testing.T) {
	dir := t.TempDir()
	f := newFakeHub()
	release := make(chan struct{})
	defer close(release)
	h := startAgent(t, dir, f, func(c *Config) {
		base, _ := sim.New(filepath.Join(dir, "sim-hang"), clock.Real{})
		c.Drivers = drivers.NewHost(hangingDriver{Driver: base, release: release})
		c.DriverTimeout = 100 * time.Millisecond
	})
	_ = h
	f.set(run("w-1", 1))
	waitFor(t, "the start to overrun its limit", func() bool {
		s, ok := f.status("w-1")
		return ok && strings.Contains(s.Detail, "timed out")
	})
	before := f.syncs()
	waitFor(t, "syncs to go on", func() bool { return f.syncs() >= before+5 })
	if s, _ := f.status("w-1"); s.Code != protocol.CodeStarting {
		t.Errorf("got %s while the call hangs, want starting", s.Code)
	}
}

func TestNewsCutsWaitingSyncShort(t *testing.T) {
	f := newFakeHub()
	f.hold = time.Hour
	startAgent(t, t.TempDir(), f)
	f.set(run("w-1", 1))
	// With an hour's hold, running is reported only because news ends
	// the waiting poll.
	waitCode(t, f, "w-1", protocol.CodeRunning)
}

// TestOneChangeCostsTwoRequests: after a new desired state the agent
// reports once its apply pass is done, and the news that follows (running)
// waits for NewsGap rather than cutting a fresh poll short: the change costs
// the answer and two reports, not a request for each piece of news.
func TestOneChangeCostsTwoRequests(t *testing.T) {
	f := newFakeHub()
	f.hold = time.Hour
	startAgent(t, t.TempDir(), f)
	waitFor(t, "the first poll to be held", func() bool { return f.syncs() >= 2 })
	before := f.syncs()
	f.set(run("w-1", 1))
	waitCode(t, f, "w-1", protocol.CodeRunning)
	time.Sleep(2 * DefaultNewsGap) // room for requests it should not make
	f.mu.Lock()
	after := f.reqs[before:]
	f.mu.Unlock()
	if len(after) > 2 {
		t.Errorf("the change cost %d requests after the answer, want at most 2 (the report, then running)", len(after))
	}
	if len(after) > 0 && len(after[0].Statuses) == 0 {
		t.Errorf("the first request after the new desired state reports nothing: it did not wait for the apply pass")
	}
}

// TestNewsBurstCostsOneRequestPerGap: a start that reports progress every
// 100 ms for two seconds cuts the held poll short at most once a NewsGap,
// not once per step: the hub's per-machine limit is for agents that loop.
func TestNewsBurstCostsOneRequestPerGap(t *testing.T) {
	f := newFakeHub()
	f.hold = time.Hour
	startAgent(t, t.TempDir(), f)
	waitFor(t, "the first poll to be held", func() bool { return f.syncs() >= 2 })
	before := f.syncs()
	w := run("w-1", 1)
	w.Image = "sim:start-delay=2s,progress=20"
	f.set(w)
	waitCode(t, f, "w-1", protocol.CodeRunning)
	n := f.syncs() - before
	// 2 s of steps: the report after the apply pass, one cut a gap, and
	// running.
	if most := int(2*time.Second/DefaultNewsGap) + 2; n > most {
		t.Errorf("20 steps of progress cost %d requests, want at most %d", n, most)
	}
}

func TestOlderDesiredStateIgnored(t *testing.T) {
	f := newFakeHub()
	h := startAgent(t, t.TempDir(), f)
	f.set(run("w-1", 1))
	waitCode(t, f, "w-1", protocol.CodeRunning)
	f.mu.Lock()
	cur := f.desired
	f.mu.Unlock()
	old := cur
	old.Generation = cur.Generation - 1
	old.Workloads = []protocol.DesiredWorkload{withMode(run("w-1", 1), protocol.ModeRemove)}
	f.setRaw(old)
	waitFor(t, "the stale answer to be seen", func() bool { return f.syncs() > 3 })
	time.Sleep(100 * time.Millisecond) // let the apply loop act if it wrongly would
	list, _ := h.sim.List(context.Background())
	if len(list) != 1 || list[0].State != drivers.StateRunning {
		t.Errorf("after a stale removal: got %+v, want w-1 running", list)
	}
	if h.agent.state.Desired.Generation != cur.Generation {
		t.Errorf("agent holds generation %d, want %d", h.agent.state.Desired.Generation, cur.Generation)
	}
}

func TestStoreChangeKeepsEverythingAndIsReported(t *testing.T) {
	f := newFakeHub()
	h := startAgent(t, t.TempDir(), f)
	f.set(run("w-1", 1))
	waitCode(t, f, "w-1", protocol.CodeRunning)
	f.setRaw(protocol.SyncResponse{StoreID: "st-2", Generation: 1, Workloads: []protocol.DesiredWorkload{}})
	// The change is reported until the hub has heard it, so look at every
	// request, not only the last: a loaded machine may poll past it.
	waitFor(t, "the agent to report the store change", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, r := range f.reqs {
			if r.PreviousStoreID == "st-1" {
				return true
			}
		}
		return false
	})
	waitCode(t, f, "w-1", protocol.CodeUnlisted)
	if _, err := os.Stat(h.sim.DataDir("w-1")); err != nil {
		t.Errorf("data after store change: %v", err)
	}
}

// Rule 6: agents check too.
func TestRule6_AgentRefuses(t *testing.T) {
	tests := []struct {
		name string
		w    protocol.DesiredWorkload
		want protocol.Code
	}{
		{"driver_missing", func() protocol.DesiredWorkload { w := run("w-1", 1); w.Driver = "vz"; return w }(), protocol.CodeRefusedDriverMissing},
		{"isolation_too_weak", func() protocol.DesiredWorkload { w := run("w-1", 1); w.Isolation = protocol.IsolationVM + 1; return w }(), protocol.CodeRefusedIsolation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeHub()
			h := startAgent(t, t.TempDir(), f)
			f.set(tt.w)
			waitCode(t, f, "w-1", tt.want)
			if n, err := h.sim.Starts("w-1"); err == nil && n > 0 {
				t.Errorf("refused workload was started %d times", n)
			}
		})
	}
}

// otherSim is a second sim driver under another name, to hold data under
// a driver other than the one desired state names.
type otherSim struct{ *sim.Driver }

func (otherSim) Name() string { return "sim-b" }

func TestRule6_RefusesDriverChangeWhileHoldingData(t *testing.T) {
	dir := t.TempDir()
	f := newFakeHub()
	startAgent(t, dir, f, func(c *Config) {
		a, _ := sim.New(filepath.Join(dir, "sim"), clock.Real{})
		b, _ := sim.New(filepath.Join(dir, "sim-b"), clock.Real{})
		c.Drivers = drivers.NewHost(a, otherSim{b})
	})
	f.set(run("w-1", 1))
	waitCode(t, f, "w-1", protocol.CodeRunning)
	moved := run("w-1", 2)
	moved.Driver = "sim-b"
	f.set(moved)
	waitCode(t, f, "w-1", protocol.CodeRefusedDriverChange)
}

func TestRule6_NeverStartsWhileGPUIsHeld(t *testing.T) {
	f := newFakeHub()
	h := startAgent(t, t.TempDir(), f, func(c *Config) { c.DriverTimeout = 100 * time.Millisecond })
	gpu := func(id string) protocol.DesiredWorkload {
		w := run(id, 1)
		w.Resources.Devices = []string{"nvidia:GPU-1"}
		return w
	}
	// w-1's stop hangs, so it holds the GPU for as long as the test looks.
	w1 := gpu("w-1")
	w1.Image = "sim:hang=stop"
	f.set(w1)
	waitCode(t, f, "w-1", protocol.CodeRunning)
	// The hub moved the GPU to w-2 while w-1 still runs on it. w-2 comes
	// first in the list, so the pass reaches it before asking w-1 to stop.
	f.set(gpu("w-2"), withMode(w1, protocol.ModePark))
	f.mu.Lock()
	gen := f.desired.Generation
	f.mu.Unlock()
	waitFor(t, "a report of w-2", func() bool {
		s, ok := f.status("w-2")
		return ok && s.Generation == gen
	})
	time.Sleep(300 * time.Millisecond) // several passes, past the stop's time limit
	if n, _ := h.sim.Starts("w-2"); n != 0 {
		t.Fatalf("w-2 was started %d times while w-1 was active on its GPU", n)
	}
	s, _ := f.status("w-2")
	if s.Code != protocol.CodeWaitingGPU || !strings.Contains(s.Detail, "w-1") {
		t.Errorf("w-2: got %s %q, want waiting_gpu naming w-1", s.Code, s.Detail)
	}
	list, _ := h.sim.List(context.Background())
	for _, in := range list {
		if in.Workload == "w-1" && in.State != drivers.StateRunning {
			t.Errorf("w-1 is %s; the test needs it running on the GPU", in.State)
		}
	}
}

// A successful sync resets the backoff: after a success, the next failure
// waits the base again, not where the failures before it left off.
func TestBackoffResetAfterSuccessfulSync(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	var calls atomic.Int64
	tr := hubclient.Func(func(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
		switch calls.Add(1) {
		case 1, 2, 3, 5:
			return nil, errors.New("connection refused")
		case 4:
			return &protocol.SyncResponse{StoreID: "st-1", Generation: 1, Workloads: []protocol.DesiredWorkload{}}, nil
		case 6:
			return nil, errors.New("connection refused")
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	startAgent(t, t.TempDir(), newFakeHub(), func(c *Config) {
		c.Transport, c.Clock = tr, clk
		// A backoff always waits its whole ceiling: 1s, 2s, 4s, 8s.
		c.Backoff = hubclient.Backoff{Base: time.Second, Rand: func(n int64) int64 { return n - 1 }}
	})
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		waitFor(t, fmt.Sprintf("sync %d", i+1), func() bool { return calls.Load() >= int64(i+1) })
		time.Sleep(30 * time.Millisecond) // the loop is asleep on its backoff
		clk.Advance(wait)
	}
	// Sync 4 succeeded and sync 5 failed at once: its wait is the base
	// again, 1s, where without the reset it would be 8s.
	waitFor(t, "sync 5", func() bool { return calls.Load() >= 5 })
	time.Sleep(30 * time.Millisecond)
	clk.Advance(time.Second)
	waitFor(t, "sync 6, a base wait after sync 5", func() bool { return calls.Load() >= 6 })
}

// The table has a cell for every pair, enumerated here from the protocol's
// modes and the drivers' states rather than from the table's own lists, so
// deleting a cell fails.
func TestTransitionsComplete(t *testing.T) {
	var wants []want
	for _, m := range []protocol.Mode{protocol.ModeRun, protocol.ModePark, protocol.ModeRemove} {
		if m == protocol.ModeRun {
			// A run is new or already started: an attempt starts once.
			wants = append(wants, "run-new", "run-started")
			continue
		}
		wants = append(wants, want(m))
	}
	wants = append(wants, "unlisted")
	states := []drivers.State{drivers.StateStarting, drivers.StateRunning, drivers.StateStopping,
		drivers.StateStopped, drivers.StateExited, drivers.StateFailed}
	obs := []observed{"absent"}
	for _, st := range states {
		obs = append(obs, observed(st))
	}
	for _, w := range wants {
		for _, o := range obs {
			if _, ok := transitions[cell{w, o}]; !ok {
				t.Errorf("no action for want %s, observed %s", w, o)
			}
		}
	}
	if want, got := len(wants)*len(obs), len(transitions); got != want {
		t.Errorf("the table has %d cells, want %d: one names a want or state that does not exist", got, want)
	}
	// Rule 3 in the table itself: nothing unlisted is started or deleted.
	for c, act := range transitions {
		if c.want == wantUnlisted && (act == start || act == remove) {
			t.Errorf("unlisted, %s: %v", c.observed, act)
		}
	}
}

func TestKeepsApplyingWhileHubUnreachable(t *testing.T) {
	dir := t.TempDir()
	f := newFakeHub()
	h := startAgent(t, dir, f)
	f.set(run("w-1", 1))
	waitCode(t, f, "w-1", protocol.CodeRunning)
	h.stop()

	down := newFakeHub()
	down.fail = errors.New("connection refused")
	h = startAgent(t, dir, down, func(c *Config) { c.Backoff.Base = time.Millisecond; c.Backoff.Cap = 10 * time.Millisecond })
	waitFor(t, "a few failed syncs", func() bool { return down.syncs() > 3 })
	list, _ := h.sim.List(context.Background())
	if len(list) != 1 || list[0].State != drivers.StateRunning {
		t.Errorf("with the hub down: got %+v, want w-1 still running", list)
	}
}

func TestInventorySentFirstAndOnlyWhenChanged(t *testing.T) {
	f := newFakeHub()
	var mu sync.Mutex
	cpus := 4
	h := startAgent(t, t.TempDir(), f, func(c *Config) {
		c.Inventory = func(context.Context) protocol.Inventory {
			mu.Lock()
			defer mu.Unlock()
			return protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: cpus, MemoryMB: 1024}
		}
	})
	waitFor(t, "a few syncs", func() bool { return f.syncs() >= 3 })
	f.mu.Lock()
	sent := 0
	for _, r := range f.reqs {
		if r.Inventory != nil {
			sent++
		}
	}
	first := f.reqs[0].Inventory
	f.mu.Unlock()
	if first == nil || sent != 1 || first.Drivers[0] != "sim" {
		t.Fatalf("inventory sent %d times (first %+v), want once, first, with its drivers", sent, first)
	}
	h.agent.Reprobe() // unchanged: nothing sent
	mu.Lock()
	cpus = 8
	mu.Unlock()
	h.agent.Reprobe()
	waitFor(t, "the changed inventory", func() bool {
		r := f.lastRequest()
		return r.Inventory != nil && r.Inventory.CPUs == 8
	})
}

func TestReadStatus(t *testing.T) {
	dir := t.TempDir()
	f := newFakeHub()
	h := startAgent(t, dir, f)
	f.set(run("w-1", 1))
	waitCode(t, f, "w-1", protocol.CodeRunning)
	var st Status
	waitFor(t, "the workloads file to say running", func() bool {
		var err error
		st, err = ReadStatus(dir)
		return err == nil && len(st.Workloads) == 1 && st.Workloads[0].State == protocol.CodeRunning
	})
	if st.MachineID != h.agent.MachineID() || !st.Running || st.LastSync == "" || len(st.Workloads) != 1 || st.DesiredGeneration == 0 {
		t.Errorf("got %+v", st)
	}
	if w := st.Workloads[0]; w.ID != "w-1" || w.State != protocol.CodeRunning || w.Attempt != 1 || w.LastError != nil {
		t.Errorf("got workload %+v, want w-1 running attempt 1 with no error", w)
	}
	h.stop()
	if st, _ := ReadStatus(dir); st.Running {
		t.Error("a stopped agent reads as running")
	}
}

// Rule 6, the record: a workload whose data the agent's own record puts
// under another driver is refused even when that driver shows no instance
// of it now (a driver that lost track, or one not offered at the moment).
func TestRule6_RefusesDriverChangeWhenOnlyTheRecordHoldsData(t *testing.T) {
	dir := t.TempDir()
	st := &localState{Workloads: map[string]*held{"w-1": {Driver: "sim", StartedAttempt: 1}}}
	if err := saveState(dir, st); err != nil {
		t.Fatal(err)
	}
	f := newFakeHub()
	var b *sim.Driver
	startAgent(t, dir, f, func(c *Config) {
		a, _ := sim.New(filepath.Join(dir, "sim"), clock.Real{})
		b, _ = sim.New(filepath.Join(dir, "sim-b"), clock.Real{})
		c.Drivers = drivers.NewHost(a, otherSim{b})
	})
	moved := run("w-1", 2)
	moved.Driver = "sim-b"
	f.set(moved)
	waitCode(t, f, "w-1", protocol.CodeRefusedDriverChange)
	if n, err := b.Starts("w-1"); err == nil && n > 0 {
		t.Errorf("sim-b started w-1 %d times while sim holds its data", n)
	}
}

// Rule 7, a started attempt whose instance stopped by itself (or by a
// hand on the machine) is reported stopped, never started again: only
// the hub makes a new attempt.
func TestRule7_StoppedAttemptIsReportedNotRestarted(t *testing.T) {
	f := newFakeHub()
	h := startAgent(t, t.TempDir(), f)
	f.set(run("w-1", 1))
	waitCode(t, f, "w-1", protocol.CodeRunning)
	if err := h.sim.Stop(context.Background(), "w-1"); err != nil {
		t.Fatal(err)
	}
	waitCode(t, f, "w-1", protocol.CodeStopped)
	time.Sleep(100 * time.Millisecond) // several apply passes
	if n, _ := h.sim.Starts("w-1"); n != 1 {
		t.Fatalf("got %d starts of attempt 1, want 1", n)
	}
	if s, _ := f.status("w-1"); s.Code != protocol.CodeStopped {
		t.Fatalf("got %s after the passes, want stopped", s.Code)
	}
}
