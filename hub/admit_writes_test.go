package hub

import (
	"context"
	"fmt"
	"testing"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// callCountingStore counts, by method, the writes of workloads and of
// machines' generations and the reads of classes and of workloads made
// through it.
type callCountingStore struct {
	store.Store
	calls map[string]int
}

type callCountingTx struct {
	store.Tx
	calls map[string]int
}

func (s *callCountingStore) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.Store.Update(ctx, func(tx store.Tx) error { return fn(callCountingTx{tx, s.calls}) })
}

func (s *callCountingStore) View(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.Store.View(ctx, func(tx store.Tx) error { return fn(callCountingTx{tx, s.calls}) })
}

func (t callCountingTx) Classes() ([]store.Class, error) {
	t.calls["Classes"]++
	return t.Tx.Classes()
}

func (t callCountingTx) Class(name string) (store.Class, error) {
	t.calls["Class "+name]++
	return t.Tx.Class(name)
}

func (t callCountingTx) PutWorkload(w store.Workload) error {
	t.calls["PutWorkload"]++
	return t.Tx.PutWorkload(w)
}

func (t callCountingTx) PutWorkloads(ws []store.Workload) error {
	t.calls["PutWorkloads"]++
	return t.Tx.PutWorkloads(ws)
}

func (t callCountingTx) BumpGeneration(id string) (int64, error) {
	t.calls["BumpGeneration"]++
	return t.Tx.BumpGeneration(id)
}

func (t callCountingTx) BumpMachines(bumps []store.Bump) ([]store.Machine, error) {
	t.calls["BumpMachines"]++
	return t.Tx.BumpMachines(bumps)
}

// Issue 13: an admit batch writes its placements together, a bump of
// the machines placed on and a write of the workloads, where each
// placement was two writes of its own. A machine's placements still take
// its new generations one each, in the order placed, the last being the
// machine's: each is listed from the desired state that set its mode.
func TestAdmitBatchWritesItsPlacementsTogether(t *testing.T) {
	h := newTestHub(t)
	for i := range 4 {
		h.machine(fmt.Sprint("m-", i))
	}
	var ws []store.Workload
	for i := range 20 {
		ws = append(ws, h.create(fmt.Sprint("web-", i), protocol.KindContainer))
	}
	counted := &callCountingStore{Store: h.st, calls: map[string]int{}}
	h.ctl.store = counted
	h.pass()
	writes := map[string]int{}
	for _, method := range []string{"PutWorkload", "PutWorkloads", "BumpGeneration", "BumpMachines"} {
		if n := counted.calls[method]; n > 0 {
			writes[method] = n
		}
	}
	if want := map[string]int{"PutWorkloads": 1, "BumpMachines": 1}; fmt.Sprint(writes) != fmt.Sprint(want) {
		t.Errorf("20 placements written with %v, want %v", writes, want)
	}
	// In the order admission read them: oldest first, then by ID.
	var placed []store.Workload
	err := h.st.View(context.Background(), func(tx store.Tx) (err error) {
		placed, err = tx.Workloads(store.WorkloadFilter{})
		return err
	})
	if err != nil || len(placed) != len(ws) {
		t.Fatalf("read %d workloads, %v; want %d", len(placed), err, len(ws))
	}
	last := map[string]int64{}
	for _, w := range placed {
		if w.State != store.StateProvisioning {
			t.Fatalf("%s: %s, want provisioning", w.ID, w.State)
		}
		if prev, ok := last[w.Machine]; ok && w.ModeGeneration != prev+1 {
			t.Errorf("%s on %s: mode generation %d after %d, want the next", w.ID, w.Machine, w.ModeGeneration, prev)
		}
		last[w.Machine] = w.ModeGeneration
	}
	if len(last) < 2 || len(last) == len(ws) {
		t.Errorf("20 workloads placed on %d machines, want several on each of more than one", len(last))
	}
	for id, gen := range last {
		if m := h.machineRow(id); m.Generation != gen {
			t.Errorf("%s at generation %d, its last placement's mode generation %d: want them equal", id, m.Generation, gen)
		}
		if resp := h.desired(id); resp.Generation != gen {
			t.Errorf("%s's desired state at generation %d, want %d", id, resp.Generation, gen)
		}
	}
}

func (t callCountingTx) Listed(machineID string) ([]store.Listed, error) {
	t.calls["Listed"]++
	return t.Tx.Listed(machineID)
}

func (t callCountingTx) Workloads(f store.WorkloadFilter) ([]store.Workload, error) {
	t.calls["Workloads"]++
	return t.Tx.Workloads(f)
}
