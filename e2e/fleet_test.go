package e2e

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/sim"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// A fleet of real agents on the sim driver, each with its own state
// directory and a made-up inventory, against one hub in this process:
// workloads land where the rules say, and what fits nowhere stays queued
// with its reason.
func TestFleetPlacesByTheRules(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, err := hub.New(ctx, hub.Config{AllowSim: true, Store: st, Logger: log, Region: "eu-west", ControllerInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "globex"} {
		if err := h.CreateTenant(ctx, tenant); err != nil {
			t.Fatal(err)
		}
	}
	machines := []struct {
		name, owner string
		inv         protocol.Inventory
	}{
		{"mac", "acme", protocol.Inventory{OS: "darwin", Arch: "arm64", AppleSilicon: true, CPUs: 12, MemoryMB: 65536,
			GPUs: []protocol.GPU{{Vendor: "apple", Model: "Apple M3 Max", ID: "0", Cores: 40}}}},
		{"gpu-box", "acme", protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 64, MemoryMB: 524288,
			GPUs: []protocol.GPU{{Vendor: "nvidia", ID: "GPU-a"}, {Vendor: "nvidia", ID: "GPU-b"}}}},
		{"small", "globex", protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 2, MemoryMB: 4096}},
	}
	ids := map[string]string{}
	for _, m := range machines {
		dir := t.TempDir()
		d, err := sim.New(filepath.Join(dir, "sim"), clock.Real{})
		if err != nil {
			t.Fatal(err)
		}
		inv := m.inv
		var machineID string
		a, err := agent.Open(agent.Config{
			StateDir: dir, Drivers: drivers.NewHost(d), Logger: log, ApplyInterval: 50 * time.Millisecond,
			Inventory: func(context.Context) protocol.Inventory { return inv },
			Transport: hubclient.Func(func(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
				return h.Sync(ctx, machineID, req)
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		machineID = a.MachineID()
		ids[m.name] = machineID
		if err := h.RegisterMachine(ctx, machineID, m.name, m.owner, "eu-west"); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); a.Run(ctx) }()
		t.Cleanup(func() { cancel(); d.Close(); <-done; a.Close() })
	}
	go h.Run(ctx)

	create := func(tenant, name string, kind protocol.Kind, class, region string) string {
		w, err := h.CreateWorkload(ctx, hub.WorkloadSpec{Tenant: tenant, Name: name, Kind: kind, Class: class, Region: region, Image: "sim:"})
		if err != nil {
			t.Fatal(err)
		}
		return w.ID
	}
	notebook := create("acme", "notebook", protocol.KindNotebook, "apple-gpu", "eu-west")
	trainer := create("acme", "trainer", protocol.KindContainer, "nvidia-1", "eu-west")
	web := create("globex", "web", protocol.KindContainer, "cpu-1", "eu-west")
	greedy := create("globex", "greedy", protocol.KindContainer, "nvidia-1", "eu-west")

	wait := func(id string, state store.State) store.Workload {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			w, err := h.Workload(ctx, id)
			if err == nil && w.State == state {
				return w
			}
			if time.Now().After(deadline) {
				t.Fatalf("workload %s: got %s (%s), want %s", id, w.State, w.Reason, state)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for id, machine := range map[string]string{notebook: "mac", trainer: "gpu-box", web: "small"} {
		w := wait(id, store.StateRunning)
		if w.Machine != ids[machine] {
			t.Errorf("%s runs on %s, want %s (%s)", w.Name, w.Machine, machine, ids[machine])
		}
	}
	if w := wait(trainer, store.StateRunning); len(w.Devices) != 1 || !strings.HasPrefix(w.Devices[0], "nvidia:") {
		t.Errorf("trainer holds devices %v, want one NVIDIA GPU", w.Devices)
	}
	w := wait(greedy, store.StateQueued)
	if !strings.Contains(w.Reason, "globex") {
		t.Errorf("queued with reason %q, want one naming the tenant", w.Reason)
	}
}
