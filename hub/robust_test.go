package hub

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/clock"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// place creates a workload and runs it to running on whichever machine
// placement picks; it returns the workload.
func (h *testHub) running(name string) store.Workload {
	h.t.Helper()
	w := h.create(name, protocol.KindContainer)
	h.pass()
	w = h.workload(w.ID)
	h.report(w.Machine, h.desired(w.Machine), status(w, protocol.ModeRun, protocol.CodeRunning))
	return wantState(h.t, h, w.ID, store.StateRunning)
}

func other(m string) string {
	if m == "m-1" {
		return "m-2"
	}
	return "m-1"
}

// Rule 8: a machine silent for 45 s is not offered for placement.
func TestRule8_SilentFor45sNotOfferedForPlacement(t *testing.T) {
	for _, tt := range []struct {
		name   string
		silent time.Duration
		want   store.State
	}{
		{"silent_44s", 44 * time.Second, store.StateProvisioning},
		{"silent_45s", 45 * time.Second, store.StateQueued},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestHub(t)
			h.machine("m-1")
			h.pass()
			h.clk.Advance(tt.silent)
			w := h.create("web", protocol.KindContainer)
			h.pass()
			got := wantState(t, h, w.ID, tt.want)
			if tt.want == store.StateQueued && !strings.Contains(got.Reason, "online") {
				t.Errorf("reason %q does not say why", got.Reason)
			}
		})
	}
}

// Rule 8, with the placement fleet kept across batches (issue 13): a
// machine that goes silent after the fleet was built, with no full read
// of the view since and no change of its own (m-2, which no placement
// touches), is not offered either: each batch judges every machine's
// presence again.
func TestRule8_SilentSinceTheFleetWasBuiltNotOfferedForPlacement(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	h.machine("m-2")
	h.pass() // the view is read whole and checked
	h.clk.Advance(31 * time.Second)
	h.pass() // checked again (every 15 s): the next batch builds the fleet
	h.clk.Advance(time.Second)
	first := h.create("first", protocol.KindContainer)
	h.pass() // 32 s silent: online, placed by a fleet built now
	wantState(t, h, first.ID, store.StateProvisioning)
	h.clk.Advance(13 * time.Second)
	second := h.create("second", protocol.KindContainer)
	h.pass() // 45 s silent, 14 s after the last check: the kept fleet decides
	got := wantState(t, h, second.ID, store.StateQueued)
	if !strings.Contains(got.Reason, "online") {
		t.Errorf("reason %q does not say why", got.Reason)
	}
}

// Rule 8: after 10 minutes offline, running workloads fail and stopping
// ones are stopped; not a moment before.
func TestRule8_OfflineFor10MinutesFailsRunningStopsStopping(t *testing.T) {
	for _, tt := range []struct {
		name        string
		offline     time.Duration
		wantRunning store.State
		wantStop    store.State
	}{
		{"offline_9m59s", 10*time.Minute - time.Second, store.StateRunning, store.StateStopping},
		{"offline_10m", 10 * time.Minute, store.StateFailed, store.StateStopped},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestHub(t)
			// Both workloads are placed while m-1 is the only machine,
			// so they share it; m-2 joins after, to show the hub's
			// network is fine.
			h.machine("m-1")
			a := h.running("a")
			b := h.running("b")
			h.machine("m-2")
			if a.Machine != "m-1" || b.Machine != "m-1" {
				t.Fatalf("placed on %s and %s, want both on m-1", a.Machine, b.Machine)
			}
			if err := h.ParkWorkload(context.Background(), b.ID); err != nil {
				t.Fatal(err)
			}
			// The other machine keeps syncing, so the hub's network is fine.
			for step := time.Duration(0); step < tt.offline; step += 20 * time.Second {
				d := min(20*time.Second, tt.offline-step)
				h.clk.Advance(d)
				h.sync(other(a.Machine), &protocol.SyncRequest{})
			}
			h.pass()
			got := wantState(t, h, a.ID, tt.wantRunning)
			wantState(t, h, b.ID, tt.wantStop)
			if tt.wantRunning == store.StateFailed && got.Reason != "its machine has been offline for 10 minutes" {
				t.Errorf("reason %q", got.Reason)
			}
		})
	}
}

// Rule 8: the hub's own downtime never counts against machines.
func TestRule8_HubDown20MinutesThenRestartedFailsNothing(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	w := h.running("web")
	h.machine("m-2")
	h.st.Close()
	h.clk.Advance(20 * time.Minute)

	// After the restart m-2 syncs, so the hub's network is fine, and m-1
	// stays silent for 9 of its 29 minutes: the 20 the hub was down do
	// not count.
	h2 := openTestHub(t, h.path, h.clk)
	for range 18 {
		h2.clk.Advance(30 * time.Second)
		h2.sync("m-2", &protocol.SyncRequest{})
	}
	h2.pass()
	wantState(t, h2, w.ID, store.StateRunning)
	// The machine comes back: it reconciles; nothing ran twice.
	d := h2.desired("m-1")
	h2.report("m-1", d, status(w, protocol.ModeRun, protocol.CodeRunning))
	h2.clk.Advance(5 * time.Minute)
	h2.sync("m-1", &protocol.SyncRequest{})
	h2.pass()
	got := wantState(t, h2, w.ID, store.StateRunning)
	if got.Attempt != 1 {
		t.Errorf("attempt %d after the hub's restart, want 1", got.Attempt)
	}
}

// Rule 8: every machine silent at once is the hub's network, not the fleet.
func TestRule8_AllMachinesSilentFailsNothing(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	h.machine("m-2")
	a := h.running("a")
	h.clk.Advance(30 * time.Minute)
	h.pass()
	wantState(t, h, a.ID, store.StateRunning)
	// One machine is heard again: the other's silence is its own.
	h.sync(other(a.Machine), &protocol.SyncRequest{})
	h.pass()
	wantState(t, h, a.ID, store.StateFailed)
}

// Rule 11: a workload provisioning past its timeout fails; progress
// extends it.
func TestRule11_ProvisioningTimeoutExtendedByProgress(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	h.machine("m-2")
	w := h.create("web", protocol.KindContainer)
	h.pass()
	w = h.workload(w.ID)
	keepAlive := func(d time.Duration) {
		for step := time.Duration(0); step < d; step += 30 * time.Second {
			h.clk.Advance(min(30*time.Second, d-step))
			h.sync("m-1", &protocol.SyncRequest{})
			h.sync("m-2", &protocol.SyncRequest{})
		}
	}
	keepAlive(14 * time.Minute)
	h.report(w.Machine, h.desired(w.Machine), status(w, protocol.ModeRun, protocol.CodeProgressing))
	keepAlive(14 * time.Minute)
	h.pass()
	wantState(t, h, w.ID, store.StateProvisioning)
	keepAlive(time.Minute)
	h.pass()
	got := wantState(t, h, w.ID, store.StateFailed)
	if got.Reason != "it did not start within 15m0s" {
		t.Errorf("reason %q", got.Reason)
	}
}

// Rule 11: an agent repeats its statuses on every sync; a repeated
// "progressing" is not progress, also when the machine's generation moved
// on under it, so a workload that stops progressing still times out.
func TestRule11_RepeatedProgressIsNotProgress(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	w := h.create("web", protocol.KindContainer)
	h.pass()
	w = h.workload(w.ID)
	progressing := status(w, protocol.ModeRun, protocol.CodeProgressing)
	progressing.Detail = "pulled 1/3 layers"
	h.clk.Advance(time.Minute)
	h.report("m-1", h.desired("m-1"), progressing)
	repeat := func(d time.Duration) {
		for step := time.Duration(0); step < d; step += 30 * time.Second {
			h.clk.Advance(min(30*time.Second, d-step))
			h.report("m-1", h.desired("m-1"), progressing)
		}
	}
	repeat(7 * time.Minute)
	// Another workload lands on the machine: its generation moves, and
	// the agent's repeated status now carries the new one.
	h.create("other", protocol.KindContainer)
	h.pass()
	repeat(7*time.Minute + 59*time.Second)
	wantState(t, h, w.ID, store.StateProvisioning)
	repeat(time.Second)
	got := wantState(t, h, w.ID, store.StateFailed)
	if got.Reason != "it did not start within 15m0s" {
		t.Errorf("reason %q", got.Reason)
	}
}

// Rule 9: one controller per region holds the lease, and a paused old
// leader's writes are refused.
func TestRule9_OneLeaderPerRegionAndStaleEpochRefused(t *testing.T) {
	a := newTestHub(t)
	a.machine("m-1")
	b := openTestHub(t, a.path, a.clk)
	ctx := context.Background()
	if err := a.Pass(ctx); err != nil {
		t.Fatalf("first hub: %v", err)
	}
	if err := b.Pass(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("second hub while the first leads: got %v, want ErrNotLeader", err)
	}
	if leading, _ := b.Leadership(); leading {
		t.Fatal("standby claims to lead")
	}

	// The leader pauses past its lease; the standby takes over.
	a.clk.Advance(DefaultLeaseTTL)
	if err := b.Pass(ctx); err != nil {
		t.Fatalf("standby after expiry: %v", err)
	}
	// The old leader wakes up still believing it leads: its writes fail.
	w := b.create("web", protocol.KindContainer)
	if err := a.ctl.pass(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("old leader's write: got %v, want ErrNotLeader", err)
	}
	wantState(t, b, w.ID, store.StatePending)
	if err := b.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, w.ID, store.StateProvisioning)
}

// Rule 9, the same holder: solo names its lease after its machine, so a
// solo hub restarted after kill -9 takes the lease back at once under the
// same holder. Its new term has a new epoch, and the old process, should
// it still be alive, can write nothing.
func TestRule9_SameHolderRestartedFencesTheOldTerm(t *testing.T) {
	old := openTestHubAs(t, filepath.Join(t.TempDir(), "hub.db"), clock.NewFake(epoch), "solo:m-1")
	old.machine("m-1")
	ctx := context.Background()
	if err := old.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := openTestHubAs(t, old.path, old.clk, "solo:m-1")
	if err := restarted.Pass(ctx); err != nil {
		t.Fatalf("the restarted hub, same holder, before the lease expired: %v", err)
	}
	w := restarted.create("web", protocol.KindContainer)
	if err := old.ctl.pass(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("the old process's write: got %v, want ErrNotLeader", err)
	}
	wantState(t, restarted, w.ID, store.StatePending)
	if err := restarted.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	wantState(t, restarted, w.ID, store.StateProvisioning)
}

// Rule 9: a leader paused past its lease writes nothing, even while no
// standby has taken the lease yet: it may have missed what changed.
func TestRule9_ExpiredLeaseFencesWrites(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	ctx := context.Background()
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	h.create("web", protocol.KindContainer)
	h.clk.Advance(DefaultLeaseTTL)
	if err := h.ctl.pass(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a write after the lease expired: got %v, want ErrNotLeader", err)
	}
}

func TestRule9_LeaderWhoseWritesFailStepsDown(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	if err := h.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	leading, changed := h.Leadership()
	if !leading {
		t.Fatal("not leading after a pass")
	}
	h.st.Close() // every write fails from here on
	if err := h.Pass(context.Background()); err == nil {
		t.Fatal("a pass on a closed store succeeded")
	}
	select {
	case <-changed:
	default:
		t.Fatal("leadership did not change")
	}
	if leading, _ := h.Leadership(); leading {
		t.Error("still leading after failed writes")
	}
}

// Rule 10: lying reports are rejected or neutralised, with nothing else
// changed.
func TestRule10_LyingReportsChangeNothing(t *testing.T) {
	appleGPU := protocol.GPU{Vendor: "apple", ID: "0", Cores: 10}
	tests := []struct {
		name string
		inv  *protocol.Inventory
	}{
		{"darwin_from_a_linux_machine", &protocol.Inventory{OS: "darwin", Arch: "arm64", CPUs: 8, MemoryMB: 16384, AppleSilicon: true, Drivers: []string{"sim"}}},
		{"apple_gpu_on_linux", &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 16384, GPUs: []protocol.GPU{appleGPU}, Drivers: []string{"sim"}}},
		{"two_apple_gpus", &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 16384, GPUs: []protocol.GPU{appleGPU, {Vendor: "apple", ID: "1"}}, Drivers: []string{"sim"}}},
		{"darwin_driver_on_linux", &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 16384, Drivers: []string{"sim", "macos-native"}}},
		{"absurd_cpus", &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 1 << 20, MemoryMB: 16384, Drivers: []string{"sim"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestHub(t)
			h.machine("m-1")
			before, _ := h.Machine(context.Background(), "m-1")
			h.sync("m-1", &protocol.SyncRequest{Inventory: tt.inv})
			after, _ := h.Machine(context.Background(), "m-1")
			if after.OS != "linux" || after.Inventory == nil || after.Inventory.CPUs != before.Inventory.CPUs ||
				len(after.Inventory.GPUs) != 0 || len(after.Inventory.Drivers) != len(before.Inventory.Drivers) {
				t.Errorf("a lying inventory was taken: %+v", after.Inventory)
			}
		})
	}
}

func TestRebootAndPartitionToldApartOnTimeline(t *testing.T) {
	started := epoch
	for _, tt := range []struct {
		name string
		req  protocol.SyncRequest
		want string
	}{
		{"rebooted", protocol.SyncRequest{BootID: "boot-2", AgentStarted: started.Add(time.Hour)}, "rebooted"},
		{"cut_off", protocol.SyncRequest{BootID: "boot-1", AgentStarted: started}, "was cut off"},
		{"agent_restarted", protocol.SyncRequest{BootID: "boot-1", AgentStarted: started.Add(time.Hour)}, "agent on machine m-1 restarted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestHub(t)
			h.machine("m-1")
			h.sync("m-1", &protocol.SyncRequest{BootID: "boot-1", AgentStarted: started})
			w := h.running("web")
			h.clk.Advance(5 * time.Minute)
			req := tt.req
			h.sync("m-1", &req)
			es, _ := h.Timeline(context.Background(), w.ID)
			last := es[len(es)-1].Text
			if !strings.Contains(last, tt.want) {
				t.Errorf("timeline ends %q, want %q", last, tt.want)
			}
		})
	}
}

func TestRule9_CleanStopGivesTheLeaseUp(t *testing.T) {
	a := newTestHub(t)
	a.machine("m-1")
	b := openTestHub(t, a.path, a.clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	// a's lease is taken on its own goroutine.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if leading, _ := a.Leadership(); leading {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a does not lead")
		}
	}
	cancel()
	<-done
	// Without waiting out the lease, b takes over.
	if err := b.Pass(context.Background()); err != nil {
		t.Fatalf("standby after a clean stop: %v", err)
	}
}

// Rule 8: an offline machine's statuses decide nothing.
func TestRule8_OfflineMachinesStatusesDecideNothing(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	w := h.create("web", protocol.KindContainer)
	h.pass()
	w = h.workload(w.ID)
	d := h.desired("m-1")
	// The report is recorded, but the machine falls silent before the
	// controller looks at it.
	h.sync("m-1", &protocol.SyncRequest{Generation: d.Generation, Statuses: []protocol.Status{
		{Workload: w.ID, Attempt: w.Attempt, Mode: protocol.ModeRun, Generation: d.Generation, Code: protocol.CodeFailedStart}}})
	h.clk.Advance(DefaultOfflineAfter)
	h.pass()
	wantState(t, h, w.ID, store.StateProvisioning)
}

// Rule 8 and rule 11 are enforced by the sweep, which the loop runs every
// sweepEvery: late by at most 1/40 of the offline failure span and 1/60
// of the provisioning timeout, never by more than a presence batch, and
// never more often than the controller ticks.
func TestSweepIsLateByAFractionOfTheSpansItEnforces(t *testing.T) {
	h := newTestHub(t)
	c := h.ctl
	if got := c.sweepEvery(); got != 15*time.Second {
		t.Errorf("sweep every %s at the defaults, want 15s", got)
	}
	c.cfg.OfflineFailAfter = 4 * time.Minute
	if got := c.sweepEvery(); got != 6*time.Second {
		t.Errorf("sweep every %s for a 4 min offline failure, want 6s", got)
	}
	c.cfg.ProvisioningTimeout = 3 * time.Minute
	if got := c.sweepEvery(); got != 3*time.Second {
		t.Errorf("sweep every %s for a 3 min provisioning timeout, want 3s", got)
	}
	c.cfg.OfflineFailAfter = 20 * time.Second
	if got := c.sweepEvery(); got != c.cfg.ControllerInterval {
		t.Errorf("sweep every %s for a 20 s offline failure, want the controller interval %s", got, c.cfg.ControllerInterval)
	}
}
