package hub

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"einsora.dev/edge/hub/store"
)

// Bounds on what agents' reports can make the store hold. Statuses are
// bounded by what is placed on each machine (recordOne); timelines by
// collapsing repeated lines and by Config.TimelineMax.
const (
	// collapseWindow: lines of one kind written within it of the first
	// collapse into that one, with a count.
	collapseWindow = 10 * time.Minute
	// droppedLogEvery spaces the log lines about dropped statuses.
	droppedLogEvery = time.Minute
)

// Counters are what the hub counts of untrusted input it refused or
// bounded, since it started.
type Counters struct {
	// DroppedStatuses: statuses of workloads not placed on the machine
	// that reported them (unknown IDs, or placed elsewhere); never stored.
	DroppedStatuses int64
	// StaleStatuses: stored statuses deleted because their workload is no
	// longer placed on the machine.
	StaleStatuses int64
	// TimelineLinesDropped: the oldest lines of timelines past TimelineMax.
	TimelineLinesDropped int64
	// TimelineLinesRetired: lines of removed workloads' timelines deleted
	// after TimelineRetention.
	TimelineLinesRetired int64
	// CapacityViewMisses: machines a leading controller's capacity view
	// had wrong at its periodic full check (capview.go); each is a change
	// the view missed, mended then. Zero in a healthy hub.
	CapacityViewMisses int64
}

type dropped struct {
	statuses, stale, trimmed atomic.Int64

	// mu guards the following fields.
	mu sync.Mutex
	// logged is when dropped statuses were last logged; unlogged counts
	// those dropped since, and last names one machine that sent them.
	logged   time.Time
	unlogged int64
	last     string
}

// Counters returns the hub's counters.
func (h *Hub) Counters() Counters {
	return Counters{
		DroppedStatuses:      h.dropped.statuses.Load(),
		StaleStatuses:        h.dropped.stale.Load(),
		TimelineLinesDropped: h.dropped.trimmed.Load() + h.ctl.trimmedLines.Load(),
		TimelineLinesRetired: h.ctl.retiredLines.Load(),
		CapacityViewMisses:   h.viewMisses(),
	}
}

// dropStatuses counts n statuses of machineID dropped, and logs them at
// most once every droppedLogEvery, so a flood of them is one line a minute.
// It runs after the report's transaction committed: a retried or failed
// batch counts nothing.
func (h *Hub) dropStatuses(machineID string, n int) {
	if n == 0 {
		return
	}
	h.dropped.statuses.Add(int64(n))
	now := h.clk.Now()
	h.dropped.mu.Lock()
	h.dropped.unlogged += int64(n)
	h.dropped.last = machineID
	if now.Sub(h.dropped.logged) < droppedLogEvery {
		h.dropped.mu.Unlock()
		return
	}
	count, last := h.dropped.unlogged, h.dropped.last
	h.dropped.logged, h.dropped.unlogged = now, 0
	h.dropped.mu.Unlock()
	// Info, not a warning: an honest agent reports a workload once or
	// twice more after the hub removed it.
	h.log.Info("dropped statuses of workloads not placed on the machine that reported them",
		"count", count, "since", droppedLogEvery, "machine", last, "total", h.dropped.statuses.Load())
}

// noteLine writes a line of kind on a workload's timeline from what an
// agent reported: a line of the same kind within collapseWindow of the
// first of its run replaces it with a count, and the timeline is trimmed
// to TimelineMax. It returns how many old lines went, and whether the line
// collapsed into the one before.
func (h *Hub) noteLine(tx store.Tx, now time.Time, workload, kind, text string) (trimmed int, collapsed bool, err error) {
	e := store.TimelineEntry{Workload: workload, At: now, Text: text, Kind: kind, Count: 1, First: now}
	last, err := tx.LastTimeline(workload)
	switch {
	case err == nil && last.Kind == kind && !last.First.IsZero() && now.Sub(last.First) < collapseWindow:
		e.Count, e.First = max(last.Count, 1)+1, last.First
		e.Text = fmt.Sprintf("%s (×%d in %d min)", text, e.Count, max(1, int(math.Ceil(now.Sub(e.First).Minutes()))))
		if err := tx.ReplaceLastTimeline(e); err != nil {
			return 0, false, err
		}
		collapsed = true
	case err == nil || errors.Is(err, store.ErrNotFound):
		if err := tx.AddTimeline(e); err != nil {
			return 0, false, err
		}
	default:
		return 0, false, err
	}
	trimmed, err = tx.TrimTimeline(workload, h.cfg.TimelineMax, trimNote(h.cfg.TimelineMax))
	return trimmed, collapsed, err
}

// trimNote is the top line of a timeline that lost its oldest lines.
func trimNote(max int) string {
	return fmt.Sprintf("older lines were dropped: a timeline keeps its latest %d lines", max)
}
