package hub

import (
	"einsora.dev/edge/hub/store"
)

// writeBehind is a transaction whose workload records are written
// together, several a statement (store.Tx.PutWorkloads), at its end
// (flush) or before a read they could change. An observation batch wrote
// each workload that moved in a statement of its own, and a burst's
// thousands of workloads starting queued those under the store's one
// writer (issue 13).
//
// A write is held back only from a read it cannot change: a read of one
// machine's workloads, where none held was read on that machine or is
// put on it. Any other read of workloads, and a delete, writes what is
// held first. It serves observation, which reads workloads only so; a
// caller that reads them otherwise through the embedded Tx must flush
// first.
type writeBehind struct {
	store.Tx
	held []store.Workload
	// heldOn counts the held records by the machine each puts its
	// workload on.
	heldOn map[string]int
	// read are the machines of the workloads read since the last flush:
	// a record held may be one read there, and the store lists it there
	// until it is written.
	read map[string]bool
}

func newWriteBehind(tx store.Tx) *writeBehind {
	return &writeBehind{Tx: tx, heldOn: map[string]int{}, read: map[string]bool{}}
}

func (t *writeBehind) PutWorkload(w store.Workload) error {
	t.held = append(t.held, w)
	t.heldOn[w.Machine]++
	return nil
}

// flush writes what is held.
func (t *writeBehind) flush() error {
	clear(t.read)
	if len(t.held) == 0 {
		return nil
	}
	err := t.Tx.PutWorkloads(t.held)
	t.held = t.held[:0]
	clear(t.heldOn)
	return err
}

func (t *writeBehind) Workloads(f store.WorkloadFilter) ([]store.Workload, error) {
	if f.Machine == "" || t.read[f.Machine] || t.heldOn[f.Machine] > 0 {
		if err := t.flush(); err != nil {
			return nil, err
		}
	}
	ws, err := t.Tx.Workloads(f)
	for _, w := range ws {
		t.read[w.Machine] = true
	}
	return ws, err
}

func (t *writeBehind) Workload(id string) (store.Workload, error) {
	if err := t.flush(); err != nil {
		return store.Workload{}, err
	}
	w, err := t.Tx.Workload(id)
	if err == nil {
		t.read[w.Machine] = true
	}
	return w, err
}

// WorkloadIDs writes what is held first: a held record may put a
// workload on machineID or take it off.
func (t *writeBehind) WorkloadIDs(machineID string) ([]string, error) {
	if err := t.flush(); err != nil {
		return nil, err
	}
	return t.Tx.WorkloadIDs(machineID)
}

// Listed writes what is held first, as WorkloadIDs does.
func (t *writeBehind) Listed(machineID string) ([]store.Listed, error) {
	if err := t.flush(); err != nil {
		return nil, err
	}
	return t.Tx.Listed(machineID)
}

func (t *writeBehind) DeleteWorkload(id string) error {
	if err := t.flush(); err != nil {
		return err
	}
	return t.Tx.DeleteWorkload(id)
}
