package hub

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

func openRegionsHub(t *testing.T, regions ...string) *testHub {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := clock.NewFake(epoch)
	authority, err := ca.Open(ca.Options{Dir: t.TempDir(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(context.Background(), Config{AllowSim: true, Store: st, Clock: clk, Regions: regions, CA: authority,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureTenant(context.Background(), "local"); err != nil {
		t.Fatal(err)
	}
	return &testHub{Hub: h, t: t, clk: clk, st: st}
}

func (h *testHub) machineIn(id, region string) {
	h.t.Helper()
	if err := h.RegisterMachine(context.Background(), id, id, "local", region); err != nil {
		h.t.Fatal(err)
	}
	h.sync(id, &protocol.SyncRequest{ProtocolVersion: protocol.Version, Inventory: testInventory()})
}

func (h *testHub) createIn(name, region string) string {
	h.t.Helper()
	w, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: name, Kind: protocol.KindContainer, Class: "cpu-1", Region: region, Image: "sim:"})
	if err != nil {
		h.t.Fatal(err)
	}
	return w.ID
}

// One hub leads two regions, each under its own lease, and places in both.
func TestOneHubLeadsTwoRegions(t *testing.T) {
	h := openRegionsHub(t, "eu", "us")
	h.machineIn("m-eu", "eu")
	h.machineIn("m-us", "us")
	eu, us := h.createIn("a", "eu"), h.createIn("b", "us")
	asia := h.createIn("c", "asia")
	h.pass()
	for id, want := range map[string]string{eu: "m-eu", us: "m-us"} {
		if w := h.workload(id); w.State != "provisioning" || w.Machine != want {
			t.Errorf("%s: got %s on %q, want provisioning on %s", id, w.State, w.Machine, want)
		}
	}
	if w := h.workload(asia); w.State != "pending" {
		t.Errorf("a workload of a region no hub leads: got %s, want pending", w.State)
	}
	if got := h.LeadingRegions(); !got["eu"] || !got["us"] || len(got) != 2 {
		t.Errorf("leading %v, want eu and us", got)
	}
	for region, want := range map[string]bool{"eu": true, "us": true, "asia": false} {
		if led, err := h.RegionLed(t.Context(), region); err != nil || led != want {
			t.Errorf("RegionLed(%s) = %v, %v; want %v", region, led, err, want)
		}
	}
	if w := h.UnledWarning(t.Context(), "asia"); w == "" {
		t.Error("no warning for region asia")
	}
}

// A hub given "*" leads every region with a machine or a token, found at
// each pass.
func TestHubLeadsEveryRegion(t *testing.T) {
	h := openRegionsHub(t, AllRegions)
	h.machineIn("m-ap", "ap")
	if _, _, err := h.CreateEnrollToken(t.Context(), "local", "sa", time.Hour); err != nil {
		t.Fatal(err)
	}
	id := h.createIn("a", "ap")
	h.pass()
	if w := h.workload(id); w.State != "provisioning" || w.Machine != "m-ap" {
		t.Errorf("got %s on %q, want provisioning on m-ap", w.State, w.Machine)
	}
	if got := h.LeadingRegions(); !got["ap"] || !got["sa"] {
		t.Errorf("leading %v, want ap and sa (its token) among them", got)
	}
	if led, _ := h.RegionLed(t.Context(), "anywhere"); !led {
		t.Error(`a "*" hub says a region goes unled`)
	}
}

// The controllers one hub runs are bounded, however many regions the
// store names.
func TestRegionsAreBounded(t *testing.T) {
	h := openRegionsHub(t, AllRegions)
	for i := range MaxRegions + 10 {
		h.addRegion(fmt.Sprintf("r-%d", i))
	}
	if n := len(h.Regions()); n != MaxRegions {
		t.Errorf("%d regions run, want at most %d", n, MaxRegions)
	}
	if h.addRegion("one-more") {
		t.Error("a region beyond the bound was accepted")
	}
	if _, err := New(context.Background(), Config{Store: h.st, Regions: make([]string, 0)}); err != nil {
		t.Fatal(err)
	}
	many := make([]string, MaxRegions+1)
	for i := range many {
		many[i] = fmt.Sprintf("r-%d", i)
	}
	if _, err := New(context.Background(), Config{Store: h.st, Regions: many}); err == nil {
		t.Error("a hub with more than MaxRegions regions started")
	}
}
