package hub

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// TestDerivedDesiredStateIsTheComputedOne: an admit batch caches the
// desired state of each machine it placed on, derived from the state
// cached at the generation before (derivePlaced). On random fleets, with
// workloads waiting for room and placed after younger ones, parked and run
// again on the machine that keeps their data, deleted, and their classes
// resized, every derived state is the one the store gives at that
// generation, and states are derived.
func TestDerivedDesiredStateIsTheComputedOne(t *testing.T) {
	ctx := context.Background()
	for seed := range 8 {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 13))
			h := newTestHub(t)
			machines := []string{"m-0", "m-1", "m-2"}
			for _, m := range machines {
				h.machine(m)
			}
			derived := 0
			for step := range 60 {
				h.clk.Advance(time.Duration(1+rng.IntN(3)) * time.Second)
				switch op := rng.IntN(10); {
				case op < 4:
					// Created together, they sort by ID.
					var specs []WorkloadSpec
					for i := range 1 + rng.IntN(3) {
						class := []string{"cpu-1", "cpu-2"}[rng.IntN(2)]
						specs = append(specs, WorkloadSpec{Tenant: "local", Name: fmt.Sprint("w-", step, "-", i), Kind: protocol.KindContainer, Class: class, Region: "local", Image: "sim:"})
					}
					if _, err := h.CreateWorkloads(ctx, specs); err != nil {
						t.Fatal(err)
					}
				case op < 6:
					// A class resized: what it frees places waiting workloads.
					class := []string{"cpu-1", "cpu-2"}[rng.IntN(2)]
					if err := h.CreateClass(ctx, store.Class{Name: class, Accelerator: "none", CPUs: 1 + rng.IntN(3), MemoryMB: 256 * (1 + rng.IntN(4))}); err != nil {
						t.Fatal(err)
					}
				case op < 8:
					w := h.anyWorkload(rng)
					if w.ID != "" && (w.State == store.StateRunning || w.State == store.StateProvisioning) {
						if err := h.ParkWorkload(ctx, w.ID); err != nil {
							t.Fatal(err)
						}
					} else if w.State == store.StateStopped {
						if err := h.RunWorkload(ctx, w.ID); err != nil {
							t.Fatal(err)
						}
					}
				case op < 9:
					if w := h.anyWorkload(rng); w.ID != "" {
						if err := h.DeleteWorkload(ctx, w.ID); err != nil {
							t.Fatal(err)
						}
					}
				default:
					// An agent says it did as asked.
					m := machines[rng.IntN(len(machines))]
					resp := h.desired(m)
					var sts []protocol.Status
					for _, dw := range resp.Workloads {
						code := map[protocol.Mode]protocol.Code{protocol.ModeRun: protocol.CodeRunning, protocol.ModePark: protocol.CodeStopped, protocol.ModeRemove: protocol.CodeRemoved}[dw.Mode]
						sts = append(sts, protocol.Status{Workload: dw.ID, Attempt: dw.Attempt, Mode: dw.Mode, Code: code, Generation: resp.Generation})
					}
					h.sync(m, &protocol.SyncRequest{Generation: resp.Generation, AppliedGeneration: resp.Generation, Statuses: sts})
				}
				// Most machines' states are cached, as their polls' would be.
				for _, m := range machines {
					if rng.IntN(4) > 0 {
						h.desired(m)
					}
				}
				before := map[string]int64{}
				for _, m := range machines {
					before[m] = h.generation(m)
				}
				h.pass()
				for _, m := range machines {
					gen := h.generation(m)
					cached, ok := h.Hub.desired.Load(m)
					if gen == before[m] || !ok || cached.(*desiredState).resp.Generation != gen {
						continue
					}
					// Only an admit batch caches a state in a pass.
					derived++
					got := cached.(*desiredState)
					h.Hub.desired.Delete(m)
					want := h.storeDesiredState(m)
					if !reflect.DeepEqual(got.resp, want.resp) || !reflect.DeepEqual(got.keys, want.keys) {
						t.Fatalf("step %d: machine %s at generation %d:\nderived  %+v\n%+v\ncomputed %+v\n%+v", step, m, got.resp.Generation, got.resp.Workloads, got.keys, want.resp.Workloads, want.keys)
					}
				}
			}
			if derived < 5 {
				t.Errorf("%d states derived in 60 steps, want 5 or more", derived)
			}
		})
	}
}

// anyWorkload is one of the hub's workloads, at random (none if it has
// none).
func (h *testHub) anyWorkload(rng *rand.Rand) store.Workload {
	h.t.Helper()
	ws, err := h.Workloads(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	if len(ws) == 0 {
		return store.Workload{}
	}
	return ws[rng.IntN(len(ws))]
}

// generation is machine id's generation in the store.
func (h *testHub) generation(id string) int64 {
	h.t.Helper()
	var gen int64
	err := h.st.View(context.Background(), func(tx store.Tx) (err error) {
		gen, _, err = tx.MachineGeneration(id)
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return gen
}

// storeDesiredState is machine id's desired state as the store gives it
// now.
func (h *testHub) storeDesiredState(id string) *desiredState {
	h.t.Helper()
	gen := h.generation(id)
	err := h.st.View(context.Background(), func(tx store.Tx) error {
		_, err := h.computeDesired(tx, id, gen)
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	cached, _ := h.Hub.desired.Load(id)
	return cached.(*desiredState)
}
