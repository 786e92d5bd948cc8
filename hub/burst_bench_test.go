package hub

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// BenchmarkBurst times a burst of one workload per machine (issue 13's
// burst row, in process) in regions of 1,000 and 10,000 machines: n
// creates, 16 at a time as the fleet bench's admin calls are, with the
// controller's passes woken by them, until every workload is placed.
// Beside each, the same creates with no controller running (admit=false):
// the floor the store's writes set, so the ratio is what admission adds.
// creates=batch makes the same workloads MaxCreateBatch a call
// (CreateWorkloads), one call at a time.
func BenchmarkBurst(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, creates := range []string{"single", "batch"} {
			for _, admit := range []bool{false, true} {
				b.Run(fmt.Sprintf("machines=%d/creates=%s/admit=%v", n, creates, admit), func(b *testing.B) { burst(b, n, creates == "batch", admit) })
			}
		}
	}
}

func burst(b *testing.B, n int, batch, admit bool) {
	ctx := context.Background()
	h := benchRegion(b, n)
	round := 0
	for b.Loop() {
		round++
		if round > 1 {
			b.StopTimer()
			clearWorkloads(b, h)
			b.StartTimer()
		}
		var passes sync.WaitGroup
		done := make(chan struct{})
		if admit {
			passes.Go(func() {
				for {
					select {
					case <-done:
						return
					case <-h.ctl.kick:
					}
					if err := h.ctl.passFor(ctx, false); err != nil {
						b.Error(err)
					}
				}
			})
		}
		if batch {
			createBatches(b, h, n, round)
		} else {
			createMany(b, h, n, round)
		}
		close(done)
		passes.Wait()
		for admit && placedCount(b, h) < n {
			if err := h.ctl.passFor(ctx, false); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/workload")
}

// createMany creates n workloads, 16 at a time.
func createMany(b *testing.B, h *Hub, n, round int) {
	b.Helper()
	ids := make(chan int)
	var workers sync.WaitGroup
	for range 16 {
		workers.Go(func() {
			for i := range ids {
				spec := WorkloadSpec{Tenant: "local", Name: fmt.Sprintf("w%d-%d", round, i), Kind: protocol.KindContainer, Class: "cpu-1", Region: "local", Image: "sim:"}
				if _, err := h.CreateWorkload(context.Background(), spec); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range n {
		ids <- i
	}
	close(ids)
	workers.Wait()
}

// createBatches creates n workloads MaxCreateBatch a call.
func createBatches(b *testing.B, h *Hub, n, round int) {
	b.Helper()
	for start := 0; start < n; start += MaxCreateBatch {
		specs := make([]WorkloadSpec, 0, MaxCreateBatch)
		for i := start; i < min(start+MaxCreateBatch, n); i++ {
			specs = append(specs, WorkloadSpec{Tenant: "local", Name: fmt.Sprintf("w%d-%d", round, i), Kind: protocol.KindContainer, Class: "cpu-1", Region: "local", Image: "sim:"})
		}
		if _, err := h.CreateWorkloads(context.Background(), specs); err != nil {
			b.Fatal(err)
		}
	}
}

func placedCount(b *testing.B, h *Hub) int {
	b.Helper()
	n := 0
	err := h.store.View(context.Background(), func(tx store.Tx) error {
		ws, err := tx.Workloads(store.WorkloadFilter{States: []store.State{store.StateProvisioning}})
		n = len(ws)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// clearWorkloads deletes every workload, between rounds; the capacity view
// reads the region again.
func clearWorkloads(b *testing.B, h *Hub) {
	b.Helper()
	err := h.store.Update(context.Background(), func(tx store.Tx) error {
		ws, err := tx.Workloads(store.WorkloadFilter{})
		if err != nil {
			return err
		}
		for _, w := range ws {
			if err := tx.DeleteWorkload(w.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	h.ctl.backend.Forget()
}
