package hub

import "time"

// Metrics is what the hub measures; hub/metrics implements it for
// Prometheus. Nil in Config measures nothing.
type Metrics interface {
	// WakeLatency is the time from a committed change to the answer of
	// the poll it woke.
	WakeLatency(d time.Duration)
	// AdmitPass is one controller pass (observe, admit, sweep).
	AdmitPass(d time.Duration)
	// Placement is one placement decision: outcome is OutcomePlaced or
	// OutcomeQueued; reason is "" when placed, else one of
	// placement.Codes or ReasonClassMissing (a bounded set).
	Placement(outcome, reason string)
}

// Placement outcomes and the one reason code the hub adds to
// placement.Codes.
const (
	OutcomePlaced      = "placed"
	OutcomeQueued      = "queued"
	ReasonClassMissing = "class_missing"
	ReasonNone         = "none"
)

type noMetrics struct{}

func (noMetrics) WakeLatency(time.Duration) {}
func (noMetrics) AdmitPass(time.Duration)   {}
func (noMetrics) Placement(string, string)  {}

// placementOutcome is one decision of an admit pass, counted once the
// pass commits (a transaction may run its function again).
type placementOutcome struct{ outcome, reason string }

// countPlacements records the decisions of a committed admit pass.
func (c *Controller) countPlacements(outcomes []placementOutcome) {
	for _, o := range outcomes {
		c.cfg.Metrics.Placement(o.outcome, o.reason)
	}
}

// timePass records how long a controller pass took.
func (c *Controller) timePass(start time.Time) {
	c.cfg.Metrics.AdmitPass(c.clk.Now().Sub(start))
}

// wakeLatency records, for a poll a change woke, the time from that
// change's commit to its answer being ready to write.
func (h *Hub) wakeLatency(w *poll) {
	if at := h.polls.committedAt(w); !at.IsZero() {
		h.cfg.Metrics.WakeLatency(h.clk.Now().Sub(at))
	}
}
