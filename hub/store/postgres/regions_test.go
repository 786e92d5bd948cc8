package postgres

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Two replicas on one database split two regions: B takes us first, so A,
// which may lead both, leads eu alone; each places in its own region, and
// neither writes the other's.
func TestReplicasSplitRegions(t *testing.T) {
	dsn := testDSN(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	newHub := func(holder string, regions ...string) *hub.Hub {
		h, err := hub.New(ctx, hub.Config{AllowSim: true, Store: open(t, dsn), Logger: log, HolderID: holder,
			Regions: regions, PollTimeout: time.Minute, ControllerInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a, b := newHub("hub-a", "eu", "us"), newHub("hub-b", "us")
	must(t, a.CreateTenant(ctx, "local"))
	inv := &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 16384, Drivers: []string{"sim"}}
	for id, region := range map[string]string{"m-eu": "eu", "m-us": "us"} {
		must(t, a.RegisterMachine(ctx, id, id, "local", region))
		_, err := a.Sync(ctx, id, &protocol.SyncRequest{ProtocolVersion: protocol.Version, Inventory: inv})
		must(t, err)
	}
	must(t, b.Pass(ctx))
	must(t, a.Pass(ctx))
	if got := a.LeadingRegions(); !got["eu"] || got["us"] {
		t.Errorf("hub-a leads %v, want eu alone", got)
	}
	if got := b.LeadingRegions(); !got["us"] {
		t.Errorf("hub-b leads %v, want us", got)
	}
	// hub-b runs no controller for eu, but sees hub-a's live lease on it.
	if led, err := b.RegionLed(ctx, "eu"); err != nil || !led {
		t.Errorf("hub-b: RegionLed(eu) = %v, %v; want true", led, err)
	}
	if led, err := b.RegionLed(ctx, "asia"); err != nil || led {
		t.Errorf("hub-b: RegionLed(asia) = %v, %v; want false", led, err)
	}
	ids := map[string]string{}
	for _, region := range []string{"eu", "us"} {
		w, err := a.CreateWorkload(ctx, hub.WorkloadSpec{Tenant: "local", Name: "w-" + region, Kind: protocol.KindContainer, Class: "cpu-1", Region: region})
		must(t, err)
		ids[region] = w.ID
	}
	// hub-a passes first: it must place eu's and leave us's to hub-b.
	must(t, a.Pass(ctx))
	if w, err := a.Workload(ctx, ids["us"]); err != nil || w.State != store.StatePending {
		t.Fatalf("us's workload after hub-a's pass: %s, %v; want pending (hub-b leads us)", w.State, err)
	}
	must(t, b.Pass(ctx))
	for region, id := range ids {
		w, err := a.Workload(ctx, id)
		must(t, err)
		if w.State != store.StateProvisioning || w.Machine != "m-"+region {
			t.Errorf("%s: %s on %q, want provisioning on m-%s", region, w.State, w.Machine, region)
		}
	}
}
