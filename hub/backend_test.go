package hub

import (
	"slices"
	"sync"
	"testing"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// recordingBackend passes every call on to the agent backend and notes it,
// so a test sees what the controller and the admin verbs told the runtime.
type recordingBackend struct {
	Backend
	// changes, when set, notes Changed too ("changed ID"), which most
	// paths call besides what a test looks for.
	changes bool
	mu      sync.Mutex
	calls   []string
}

func (r *recordingBackend) Changed(ids ...string) {
	if r.changes {
		for _, id := range ids {
			r.note("changed " + id)
		}
	}
	r.Backend.Changed(ids...)
}

func (r *recordingBackend) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
}

func (r *recordingBackend) Capacity(tx store.Tx, classes map[string]store.Class) (Capacity, error) {
	r.note("capacity")
	return r.Backend.Capacity(tx, classes)
}

func (r *recordingBackend) Observe(tx store.Tx, machineID string) (Observation, bool, error) {
	r.note("observe " + machineID)
	return r.Backend.Observe(tx, machineID)
}

func (r *recordingBackend) Run(refs ...Ref) {
	for _, ref := range refs {
		r.note("run " + ref.Workload + " on " + ref.Machine)
	}
	r.Backend.Run(refs...)
}

func (r *recordingBackend) Placed(classes map[string]store.Class, ws ...store.Workload) {
	for _, w := range ws {
		r.note("placed " + w.ID + " on " + w.Machine)
	}
	r.Backend.Placed(classes, ws...)
}

func (r *recordingBackend) Park(refs ...Ref) {
	for _, ref := range refs {
		r.note("park " + ref.Workload + " on " + ref.Machine)
	}
	r.Backend.Park(refs...)
}

func (r *recordingBackend) Delete(refs ...Ref) {
	for _, ref := range refs {
		r.note("delete " + ref.Workload + " on " + ref.Machine)
	}
	r.Backend.Delete(refs...)
}

func (r *recordingBackend) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

// TestControllerReachesTheRuntimeThroughTheBackend: placing asks the
// backend for capacity and tells it what it placed, to run; a report is read through
// Observe; parking and deleting tell it so, naming workload and machine.
func TestControllerReachesTheRuntimeThroughTheBackend(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	rec := &recordingBackend{Backend: h.backend}
	h.backend, h.ctl.backend = rec, rec
	w := h.create("web", protocol.KindContainer)
	h.pass()
	calls := rec.take()
	for _, want := range []string{"capacity", "placed " + w.ID + " on m-1"} {
		if !slices.Contains(calls, want) {
			t.Errorf("admitting: calls %q lack %q", calls, want)
		}
	}
	w = h.workload(w.ID)
	h.report("m-1", h.desired("m-1"), status(w, protocol.ModeRun, protocol.CodeRunning))
	if calls := rec.take(); !slices.Contains(calls, "observe m-1") {
		t.Errorf("observing: calls %q lack observe m-1", calls)
	}
	wantState(t, h, w.ID, store.StateRunning)
	if err := h.ParkWorkload(t.Context(), w.ID); err != nil {
		t.Fatal(err)
	}
	if calls := rec.take(); !slices.Equal(calls, []string{"park " + w.ID + " on m-1"}) {
		t.Errorf("parking: calls %q", calls)
	}
	if err := h.DeleteWorkload(t.Context(), w.ID); err != nil {
		t.Fatal(err)
	}
	if calls := rec.take(); !slices.Equal(calls, []string{"delete " + w.ID + " on m-1"}) {
		t.Errorf("deleting: calls %q", calls)
	}
}

// TestAbsentWorkloadIsRunAgainThroughTheBackend: rule 11's second half,
// through the seam: provisioning, applied, unreported means Run again.
func TestAbsentWorkloadIsRunAgainThroughTheBackend(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	rec := &recordingBackend{Backend: h.backend}
	h.backend, h.ctl.backend = rec, rec
	w := h.create("web", protocol.KindContainer)
	h.pass()
	rec.take()
	// Its agent applied the desired state listing w and says nothing of
	// it; a later pass observes the machine.
	h.report("m-1", h.desired("m-1"))
	h.ctl.markDirty("m-1")
	h.pass()
	if calls := rec.take(); !slices.Contains(calls, "run "+w.ID+" on m-1") {
		t.Errorf("calls %q: want %s run again", calls, w.ID)
	}
	wantState(t, h, w.ID, store.StateProvisioning)
}

// Issue 13: observing a report has the capacity view read the machine
// again only when a workload there stopped holding capacity, not for each
// workload now running (a burst's reports read the whole region again).
func TestObservationMarksOnlyMachinesWhoseCapacityFreed(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	rec := &recordingBackend{Backend: h.backend, changes: true}
	h.backend, h.ctl.backend = rec, rec
	w := h.create("web", protocol.KindContainer)
	h.pass()
	w = h.workload(w.ID)
	rec.take()
	h.report("m-1", h.desired("m-1"), status(w, protocol.ModeRun, protocol.CodeRunning))
	wantState(t, h, w.ID, store.StateRunning)
	if calls := rec.take(); slices.Contains(calls, "changed m-1") {
		t.Errorf("a workload now running marked its machine changed: %q", calls)
	}
	if err := h.ParkWorkload(t.Context(), w.ID); err != nil {
		t.Fatal(err)
	}
	h.pass()
	w = h.workload(w.ID)
	rec.take()
	h.report("m-1", h.desired("m-1"), status(w, protocol.ModePark, protocol.CodeStopped))
	wantState(t, h, w.ID, store.StateStopped)
	if calls := rec.take(); !slices.Contains(calls, "changed m-1") {
		t.Errorf("a stopped workload freed capacity and its machine was not marked changed: %q", calls)
	}
}
