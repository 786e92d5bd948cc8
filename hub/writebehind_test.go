package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Issue 13: an observation batch writes the workloads it moves together,
// not a statement each, and every one of them moves.
func TestObservationWritesItsMovesTogether(t *testing.T) {
	h := newTestHub(t)
	ws := reportedFleet(t, h, 5)
	counted := &callCountingStore{Store: h.st, calls: map[string]int{}}
	h.ctl.store = counted
	if err := h.ctl.observe(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Each of the 5 machines' workloads read once, and written together.
	if want := map[string]int{"PutWorkloads": 1, "Workloads": 5}; fmt.Sprint(counted.calls) != fmt.Sprint(want) {
		t.Errorf("10 workloads moved to running with %v, want %v", counted.calls, want)
	}
	for _, w := range ws {
		wantState(t, h, w.ID, store.StateRunning)
	}
}

// A write held back is read back wherever it could be read: by its ID,
// among every workload, on the machine it was put on, and not on the
// machine it left, however it was read there (by machine or by ID). A
// workload held, then deleted, is gone. A read of another machine's
// workloads writes nothing.
func TestWriteBehindReadsWhatItHolds(t *testing.T) {
	h := newTestHub(t)
	// A machine's 8 CPUs each: one workload on each machine.
	if err := h.CreateClass(context.Background(), store.Class{Name: "cpu-8", Accelerator: "none", CPUs: 8, MemoryMB: 2048}); err != nil {
		t.Fatal(err)
	}
	var ws []store.Workload
	for i := range 5 {
		h.machine(fmt.Sprint("m-", i))
		w, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: fmt.Sprint("web-", i), Kind: protocol.KindContainer, Class: "cpu-8", Region: "local", Image: "sim:"})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	h.pass()
	reason := func(w store.Workload, err error) string {
		if err != nil {
			t.Fatal(err)
		}
		return w.Reason
	}
	// find(id)(ws, err) is the reason of workload id among ws.
	find := func(id string) func([]store.Workload, error) string {
		return func(ws []store.Workload, err error) string {
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range ws {
				if w.ID == id {
					return w.Reason
				}
			}
			return "(not listed)"
		}
	}
	err := h.st.Update(context.Background(), func(tx store.Tx) error {
		calls := map[string]int{}
		wb := newWriteBehind(callCountingTx{tx, calls})
		on := func(machine string) ([]store.Workload, error) {
			return wb.Workloads(store.WorkloadFilter{Machine: machine})
		}
		w0, err := wb.Workload(ws[0].ID)
		if err != nil {
			return err
		}
		// Read on its machine, held, then read there again.
		on0, err := on(w0.Machine)
		if err != nil || len(on0) != 1 {
			t.Fatalf("%d workloads on %s, %v; want 1", len(on0), w0.Machine, err)
		}
		w0 = on0[0]
		was := w0.Machine
		w0.Machine, w0.Reason = "", "held off its machine"
		wb.PutWorkload(w0)
		if got := find(w0.ID)(on(was)); got != "(not listed)" {
			t.Errorf("read again on the machine it left: listed with reason %q, want not listed", got)
		}
		// Read by its ID, held off its machine, then read there.
		w4, err := wb.Workload(ws[4].ID)
		if err != nil {
			return err
		}
		left := w4.Machine
		w4.Machine, w4.Reason = "", "read by ID, held off its machine"
		wb.PutWorkload(w4)
		if got := find(w4.ID)(on(left)); got != "(not listed)" {
			t.Errorf("read by ID, then on the machine it left: listed with reason %q, want not listed", got)
		}
		// Held, moved to a machine not yet read.
		w1 := h.workload(ws[1].ID)
		w1.Machine, w1.Reason = "m-moved", "held on another machine"
		wb.PutWorkload(w1)
		if got := find(w1.ID)(on("m-moved")); got != w1.Reason {
			t.Errorf("read on the machine it is put on: reason %q, want %q", got, w1.Reason)
		}
		// Held, read by its ID and among every workload.
		w2 := h.workload(ws[2].ID)
		w2.Reason = "held, read by ID"
		wb.PutWorkload(w2)
		if got := reason(wb.Workload(w2.ID)); got != w2.Reason {
			t.Errorf("read by its ID: reason %q, want %q", got, w2.Reason)
		}
		w2.Reason = "held, read among all"
		wb.PutWorkload(w2)
		if got := find(w2.ID)(wb.Workloads(store.WorkloadFilter{})); got != w2.Reason {
			t.Errorf("read among every workload: reason %q, want %q", got, w2.Reason)
		}
		// Held, moved to another machine, then its IDs read.
		w2.Machine, w2.Reason = "m-ids", "held, its machine's IDs read"
		wb.PutWorkload(w2)
		if ids, err := wb.WorkloadIDs("m-ids"); err != nil || !slices.Equal(ids, []string{w2.ID}) {
			t.Errorf("the IDs on the machine it is put on: %q, %v; want %s", ids, err, w2.ID)
		}
		// Held, then deleted.
		w3 := h.workload(ws[3].ID)
		w3.Reason = "held, then deleted"
		wb.PutWorkload(w3)
		if err := wb.DeleteWorkload(w3.ID); err != nil {
			t.Errorf("delete of a workload held: %v", err)
		}
		// Held, and another machine read: nothing written yet.
		w2.Reason = "held past another machine's read"
		wb.PutWorkload(w2)
		before := calls["PutWorkloads"]
		if _, err := on(w3.Machine); err != nil {
			return err
		}
		if calls["PutWorkloads"] != before {
			t.Error("a read of another machine's workloads wrote what was held")
		}
		return wb.flush()
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.workload(ws[2].ID).Reason; got != "held past another machine's read" {
		t.Errorf("after the flush: reason %q, want the last held", got)
	}
	err = h.st.View(context.Background(), func(tx store.Tx) error {
		_, err := tx.Workload(ws[3].ID)
		return err
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the workload held then deleted: got %v, want ErrNotFound", err)
	}
}

// A write held back is written before a machine's desired state is read
// through the transaction (Listed): a workload held off its machine is
// not listed there.
func TestWriteBehindListsWhatItHolds(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	w := h.create("web", protocol.KindContainer)
	h.pass()
	err := h.st.Update(context.Background(), func(tx store.Tx) error {
		wb := newWriteBehind(tx)
		held, err := wb.Workload(w.ID)
		if err != nil {
			return err
		}
		held.Machine = ""
		wb.PutWorkload(held)
		ls, err := wb.Listed("m-1")
		if err != nil {
			return err
		}
		if len(ls) != 0 {
			t.Errorf("a workload held off m-1 is listed there: %+v", ls)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
