package hub

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

// BenchmarkChangeCost times what one single-workload change costs the
// leading controller in a region of 100, 1,000 and 10,000 online
// machines, in one run so the ratio between sizes is measured: a create
// and the pass it wakes (untimed, as a change's is), which places it.
// Issue 13 asks for a cost flat in the fleet's size.
func BenchmarkChangeCost(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint("machines=", n), func(b *testing.B) {
			ctx := context.Background()
			h := benchRegion(b, n)
			i := 0
			cpu0 := processCPU()
			for b.Loop() {
				i++
				if _, err := h.CreateWorkload(ctx, WorkloadSpec{Tenant: "local", Name: fmt.Sprint("w", i), Kind: protocol.KindContainer, Class: "cpu-1", Region: "local", Image: "sim:"}); err != nil {
					b.Fatal(err)
				}
				if err := h.ctl.passFor(ctx, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkIdleSweep times the controller's timed pass when nothing
// changed, which sweeps (offline and stuck workloads) every
// ControllerInterval: the idle cost a region pays whatever its agents do,
// at 1,000 and 10,000 machines in one run.
func BenchmarkIdleSweep(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint("machines=", n), func(b *testing.B) {
			ctx := context.Background()
			h := benchRegion(b, n)
			cpu0 := processCPU()
			for b.Loop() {
				if err := h.ctl.sweep(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchRegion is a hub on a SQLite file whose region holds n online
// machines of 64 CPUs, each registered and synced with an inventory, on a
// clock that stands still (so none goes offline), after one pass.
func benchRegion(b *testing.B, n int) *Hub {
	b.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "hub.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	h, err := New(ctx, Config{AllowSim: true, Store: st, Clock: clock.NewFake(epoch), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if err := h.EnsureTenant(ctx, "local"); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("m-%05d", i)
		if err := h.RegisterMachine(ctx, id, id, "local", "local"); err != nil {
			b.Fatal(err)
		}
		inv := testInventory()
		inv.CPUs = 64
		if _, err := h.Sync(ctx, id, &protocol.SyncRequest{ProtocolVersion: protocol.Version, Inventory: inv}); err != nil {
			b.Fatal(err)
		}
	}
	if err := h.Pass(ctx); err != nil {
		b.Fatal(err)
	}
	return h
}
