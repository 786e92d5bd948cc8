package hub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// updateCounting counts the write transactions made through a store, and
// fails the reads of one machine's statuses.
type updateCounting struct {
	store.Store
	updates atomic.Int64
	failFor string
}

func (s *updateCounting) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	s.updates.Add(1)
	return s.Store.Update(ctx, func(tx store.Tx) error { return fn(failingStatusesTx{tx, s.failFor}) })
}

type failingStatusesTx struct {
	store.Tx
	failFor string
}

func (t failingStatusesTx) Statuses(machineID string) ([]store.StatusRecord, error) {
	if machineID == t.failFor {
		return nil, errors.New("disk I/O error")
	}
	return t.Tx.Statuses(machineID)
}

// reportedFleet fills n machines of 8 CPUs with two 4-CPU workloads each
// and has every machine report its two running, unobserved yet.
func reportedFleet(t *testing.T, h *testHub, n int) []store.Workload {
	t.Helper()
	for i := range n {
		h.machine(fmt.Sprintf("m-%d", i))
	}
	var ws []store.Workload
	for i := range 2 * n {
		w, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: fmt.Sprintf("web-%d", i), Kind: protocol.KindContainer, Class: "cpu-4", Region: "local", Image: "sim:"})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	h.pass()
	on := map[string][]protocol.Status{}
	for i := range ws {
		ws[i] = h.workload(ws[i].ID)
		on[ws[i].Machine] = append(on[ws[i].Machine], status(ws[i], protocol.ModeRun, protocol.CodeRunning))
	}
	if len(on) != n {
		t.Fatalf("%d workloads placed on %d machines, want %d", len(ws), len(on), n)
	}
	for id, sts := range on {
		resp := h.desired(id)
		for i := range sts {
			sts[i].Generation = resp.Generation
		}
		h.sync(id, &protocol.SyncRequest{Generation: resp.Generation, AppliedGeneration: resp.Generation, Statuses: sts})
	}
	return ws
}

// Issue 13: the machines that reported are observed a batch at a time,
// not in one transaction each, so a fleet's burst of reports does not
// keep admission waiting behind it.
func TestObservationTakesMachinesInBatches(t *testing.T) {
	h := newTestHub(t)
	ws := reportedFleet(t, h, 5)
	counted := &updateCounting{Store: h.st}
	h.ctl.store = counted
	if err := h.ctl.observe(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := counted.updates.Load(); got != 1 {
		t.Errorf("5 machines' reports observed in %d transactions, want 1", got)
	}
	for _, w := range ws {
		wantState(t, h, w.ID, store.StateRunning)
	}
}

// A machine whose observation fails holds back no other in its batch: the
// batch is observed again a machine at a time, and the error names it.
func TestObservationFailureHoldsBackNoOtherMachine(t *testing.T) {
	h := newTestHub(t)
	ws := reportedFleet(t, h, 4)
	bad := ws[2].Machine
	h.ctl.store = &updateCounting{Store: h.st, failFor: bad}
	err := h.ctl.observe(context.Background())
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("observe: %v, want an error naming %s", err, bad)
	}
	for _, w := range ws {
		want := store.StateRunning
		if w.Machine == bad {
			want = store.StateProvisioning
		}
		wantState(t, h, w.ID, want)
	}
}
