package hub

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

func benchHub(b *testing.B, workloads int) (*Hub, *protocol.SyncResponse) {
	b.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "hub.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	h, err := New(context.Background(), Config{AllowSim: true, Store: st, Clock: clock.Real{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	h.EnsureTenant(ctx, "local")
	h.RegisterMachine(ctx, "m-1", "m-1", "local", "local")
	inv := &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 256, MemoryMB: 1 << 20, Drivers: []string{"sim"}}
	if _, err := h.Sync(ctx, "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, Inventory: inv}); err != nil {
		b.Fatal(err)
	}
	for i := range workloads {
		if _, err := h.CreateWorkload(ctx, WorkloadSpec{Tenant: "local", Name: "w" + string(rune('a'+i%26)), Kind: protocol.KindContainer, Class: "cpu-1", Region: "local"}); err != nil {
			b.Fatal(err)
		}
	}
	if err := h.Pass(ctx); err != nil {
		b.Fatal(err)
	}
	d, err := h.Desired(ctx, "m-1")
	if err != nil {
		b.Fatal(err)
	}
	return h, d
}

// BenchmarkSyncChangeDelivered measures a change reaching a waiting agent:
// from the generation bump and wake to the desired state in the agent's
// hands, with ten workloads on the machine.
func BenchmarkSyncChangeDelivered(b *testing.B) {
	h, d := benchHub(b, 10)
	ctx := context.Background()
	gen := d.Generation
	for b.Loop() {
		b.StopTimer()
		got := make(chan *protocol.SyncResponse, 1)
		go func() {
			resp, err := h.Sync(ctx, "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: d.StoreID, Generation: gen})
			if err != nil {
				b.Error(err)
			}
			got <- resp
		}()
		for !h.polls.connected("m-1") {
		}
		b.StartTimer()
		h.store.Update(ctx, func(tx store.Tx) (err error) { gen, err = tx.BumpGeneration("m-1"); return err })
		h.Wake("m-1")
		resp := <-got
		if resp.Generation != gen || len(resp.Workloads) != 10 {
			b.Fatalf("got generation %d with %d workloads", resp.Generation, len(resp.Workloads))
		}
	}
}

// BenchmarkSyncReport measures one sync that records a report of ten
// statuses and answers at once with ten workloads: the hub's cost of one
// agent round trip.
func BenchmarkSyncReport(b *testing.B) {
	h, d := benchHub(b, 10)
	ctx := context.Background()
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version, Generation: d.Generation}
	for _, w := range d.Workloads {
		req.Statuses = append(req.Statuses, protocol.Status{Workload: w.ID, Attempt: w.Attempt, Mode: w.Mode, Generation: d.Generation, Code: protocol.CodeRunning})
	}
	for b.Loop() {
		if _, err := h.Sync(ctx, "m-1", req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSyncReportParallel measures many agents reporting at once, each
// a changed status, as after a hub restart: the hub's write path under
// contention.
func BenchmarkSyncReportParallel(b *testing.B) {
	h, d := benchHub(b, 1)
	ctx := context.Background()
	const machines = 64
	for i := range machines {
		id := fmt.Sprintf("m-p%d", i)
		h.RegisterMachine(ctx, id, id, "local", "local")
	}
	var next atomic.Int64
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprintf("m-p%d", next.Add(1)%machines)
		n := 0
		for pb.Next() {
			n++
			req := &protocol.SyncRequest{ProtocolVersion: protocol.Version, Generation: d.Generation, Statuses: []protocol.Status{
				{Workload: "w-x", Attempt: 1, Mode: protocol.ModeRun, Generation: int64(n), Code: protocol.CodeRunning},
			}}
			if _, err := h.Sync(ctx, id, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDesiredComputed measures a woken machine's desired state read
// from the store, its cache cleared each time, with one workload listed:
// what each machine of a burst costs the hub after its wake.
func BenchmarkDesiredComputed(b *testing.B) {
	h, _ := benchHub(b, 1)
	ctx := context.Background()
	for b.Loop() {
		h.desired.Clear()
		d, err := h.Desired(ctx, "m-1")
		if err != nil || len(d.Workloads) != 1 {
			b.Fatalf("desired state of %d workloads, %v; want 1", len(d.Workloads), err)
		}
	}
}

// BenchmarkPlacementDelivered times a placement reaching its machine: a
// create, the admit pass that places it, and the desired state the
// machine's woken poll reads, on a machine already holding 0, 10 or 100
// workloads. derived=false drops the cached state before that read, so
// the state is computed from the store, as it was before admission
// derived it: the baseline, in the same run.
func BenchmarkPlacementDelivered(b *testing.B) {
	for _, held := range []int{0, 10, 100} {
		for _, derived := range []bool{false, true} {
			b.Run(fmt.Sprintf("held=%d/derived=%v", held, derived), func(b *testing.B) {
				h, _ := benchHub(b, held)
				ctx := context.Background()
				i := 0
				for b.Loop() {
					i++
					w, err := h.CreateWorkload(ctx, WorkloadSpec{Tenant: "local", Name: fmt.Sprint("new-", i), Kind: protocol.KindContainer, Class: "cpu-1", Region: "local", Image: "sim:"})
					if err != nil {
						b.Fatal(err)
					}
					if err := h.ctl.passFor(ctx, false); err != nil {
						b.Fatal(err)
					}
					if !derived {
						h.desired.Delete("m-1")
					}
					resp, err := h.Desired(ctx, "m-1")
					if err != nil || len(resp.Workloads) != held+1 {
						b.Fatalf("%d workloads listed, %v; want %d", len(resp.Workloads), err, held+1)
					}
					b.StopTimer()
					unplace(b, h, w.ID)
					b.StartTimer()
				}
			})
		}
	}
}

// unplace deletes workload id from m-1 and bumps the machine, as the
// workload's removal would, then brings the capacity view and the cached
// desired state up to it, as the controller's warm step and the machine's
// poll would.
func unplace(b *testing.B, h *Hub, id string) {
	b.Helper()
	ctx := context.Background()
	err := h.store.Update(ctx, func(tx store.Tx) error {
		if err := tx.DeleteWorkload(id); err != nil {
			return err
		}
		_, err := tx.BumpGeneration("m-1")
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	h.ctl.backend.Changed("m-1")
	if err := h.ctl.warm(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := h.Desired(ctx, "m-1"); err != nil {
		b.Fatal(err)
	}
}
