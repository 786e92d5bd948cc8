package hub

import (
	"context"
	"fmt"
	"testing"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// classReadsStore counts the reads of classes made through its views.
type classReadsStore struct {
	store.Store
	calls map[string]int
}

type classReadsTx struct {
	store.Tx
	calls map[string]int
}

func (s *classReadsStore) View(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.Store.View(ctx, func(tx store.Tx) error { return fn(classReadsTx{tx, s.calls}) })
}

func (t classReadsTx) Classes() ([]store.Class, error) {
	t.calls["Classes"]++
	return t.Tx.Classes()
}

func (t classReadsTx) Class(name string) (store.Class, error) {
	t.calls["Class "+name]++
	return t.Tx.Class(name)
}

// Issue 13: a machine's desired state reads the classes of the workloads
// it lists, each once, and not every class: a burst wakes every machine.
// Each workload is sized by its own class.
func TestDesiredReadsTheClassesItLists(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	for i, class := range []string{"cpu-1", "cpu-2", "cpu-1"} {
		if _, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: fmt.Sprint("web-", i), Kind: protocol.KindContainer, Class: class, Region: "local", Image: "sim:"}); err != nil {
			t.Fatal(err)
		}
	}
	h.pass()
	counted := &classReadsStore{Store: h.st, calls: map[string]int{}}
	h.store = counted
	h.Hub.desired.Clear()
	resp, err := h.Desired(context.Background(), "m-1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"Class cpu-1": 1, "Class cpu-2": 1}
	if fmt.Sprint(counted.calls) != fmt.Sprint(want) {
		t.Errorf("a desired state of classes cpu-1 and cpu-2 read %v, want %v", counted.calls, want)
	}
	cpus := map[string]int{}
	for _, w := range resp.Workloads {
		cpus[w.ID] = w.Resources.CPUs
	}
	var ws []store.Workload
	err = h.st.View(context.Background(), func(tx store.Tx) (err error) { ws, err = tx.Workloads(store.WorkloadFilter{}); return err })
	if err != nil || len(ws) != 3 || len(resp.Workloads) != 3 {
		t.Fatalf("%d workloads, %d listed, %v; want 3", len(ws), len(resp.Workloads), err)
	}
	for _, w := range ws {
		if wantCPUs := map[string]int{"cpu-1": 1, "cpu-2": 2}[w.Class]; cpus[w.ID] != wantCPUs {
			t.Errorf("%s of class %s listed with %d CPUs, want %d", w.ID, w.Class, cpus[w.ID], wantCPUs)
		}
	}
}
