package hub

import (
	"time"

	"einsora.dev/edge/hub/store"
)

// move puts w in state to, with reason, writes the timeline, and when its
// mode on its machine changes bumps the machine's generation in the same
// transaction and notes the change for the backend, told after commit
// (through wakes). The admin verbs and the controller share it.
func move(tx store.Tx, now time.Time, w *store.Workload, to store.State, reason, text string, wakes *changes) error {
	before, beforeListed := modeOf(*w)
	w.State, w.Reason, w.Since = to, reason, now
	after, afterListed := modeOf(*w)
	if w.Machine != "" && (before != after || beforeListed != afterListed) {
		gen, err := tx.BumpGeneration(w.Machine)
		if err != nil {
			return err
		}
		w.ModeGeneration = gen
		wakes.add(after, w.ID, w.Machine)
	}
	if err := tx.PutWorkload(*w); err != nil {
		return err
	}
	return timeline(tx, now, w.ID, text)
}

func timeline(tx store.Tx, now time.Time, workload, text string) error {
	return tx.AddTimeline(store.TimelineEntry{Workload: workload, At: now, Text: text})
}
