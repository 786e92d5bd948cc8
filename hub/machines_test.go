package hub

import (
	"context"
	"testing"
	"time"

	"einsora.dev/edge/protocol"
)

// The fleet's counts by state are what the machines list shows: online,
// offline (silent past the rule) and revoked, from the light read.
func TestMachineCountsAgreeWithTheMachinesList(t *testing.T) {
	h := newTestHub(t)
	ctx := context.Background()
	for _, id := range []string{"m-silent", "m-revoked", "m-a", "m-b"} {
		h.machine(id)
	}
	h.clk.Advance(time.Minute)
	for _, id := range []string{"m-revoked", "m-a", "m-b"} {
		h.sync(id, &protocol.SyncRequest{})
	}
	if err := h.RevokeMachine(ctx, "m-revoked"); err != nil {
		t.Fatal(err)
	}
	views, err := h.Machines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, v := range views {
		want[v.Region+"/"+v.State()]++
	}
	if want["local/online"] != 2 || want["local/offline"] != 1 || want["local/revoked"] != 1 {
		t.Fatalf("the list shows %v: the test shows nothing", want)
	}
	counts, err := h.MachineCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, c := range counts {
		got[c.Region+"/"+c.State] += c.N
	}
	if len(got) != len(want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: counted %d, want %d", k, got[k], n)
		}
	}
}

// BenchmarkFleetCount is what a metrics scrape costs the hub at 10,000
// machines: counting them by state (MachineCounts) beside reading every
// machine's view (Machines), which the scrape did before.
func BenchmarkFleetCount(b *testing.B) {
	ctx := context.Background()
	h := benchRegion(b, 10000)
	b.Run("MachineCounts", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.MachineCounts(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Machines", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.Machines(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
