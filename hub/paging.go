package hub

import (
	"context"

	"einsora.dev/edge/hub/store"
)

// MachinesAfter returns one page of machines in ID order: at most limit,
// whose IDs sort after after ("" for the first page). Lists of a large
// fleet use it so a page never reads every machine.
func (h *Hub) MachinesAfter(ctx context.Context, after string, limit int) ([]MachineView, error) {
	var ms []store.Machine
	err := h.store.View(ctx, func(tx store.Tx) (err error) { ms, err = tx.MachinesAfter(after, limit); return err })
	out := make([]MachineView, len(ms))
	for i, m := range ms {
		out[i] = MachineView{Machine: m, Online: h.online(m)}
	}
	return out, err
}

// EnrollTokens returns the newest limit enrolment tokens, newest first.
// Only their hashes are stored: none can be shown again.
func (h *Hub) EnrollTokens(ctx context.Context, limit int) (ts []store.Token, err error) {
	err = h.store.View(ctx, func(tx store.Tx) error { ts, err = tx.Tokens(limit); return err })
	return ts, err
}

// MachineWorkloads returns the workloads placed on one machine.
func (h *Hub) MachineWorkloads(ctx context.Context, machineID string) (ws []store.Workload, err error) {
	err = h.store.View(ctx, func(tx store.Tx) error {
		ws, err = tx.Workloads(store.WorkloadFilter{Machine: machineID})
		return err
	})
	return ws, err
}
