package dashboard

import (
	"context"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
)

// workloadRow is a workload as the pages show it: with UnknownSince set
// when its machine is offline, so a stored "running" is not shown as
// what the machine does now.
type workloadRow struct {
	store.Workload
	UnknownSince time.Time
}

// workloadRows reads the machine of each workload once (the rows are one
// page, so at most a page of machines); known holds machines already read.
func (d *Dashboard) workloadRows(ctx context.Context, ws []store.Workload, known ...hub.MachineView) []workloadRow {
	machines := map[string]hub.MachineView{}
	for _, m := range known {
		machines[m.ID] = m
	}
	out := make([]workloadRow, len(ws))
	for i, w := range ws {
		out[i].Workload = w
		if w.Machine == "" {
			continue
		}
		m, ok := machines[w.Machine]
		if !ok {
			// A machine removed since, or unreadable now: its state is
			// not guessed.
			m, _ = d.cfg.Hub.Machine(ctx, w.Machine)
			machines[w.Machine] = m
		}
		out[i].UnknownSince = hub.UnknownSince(w, m)
	}
	return out
}
