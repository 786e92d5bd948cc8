package hub

import (
	"fmt"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// noteRestarts writes one timeline line for each local restart of w's
// attempt that its agent reported and the timeline lacks. s answers w (see
// answers). A restart moves nothing: a running workload whose agent says
// "starting" while it waits to restart stays running.
func noteRestarts(tx store.Tx, c *Controller, w *store.Workload, s protocol.Status) error {
	if s.Restarts <= w.Restarts {
		return nil
	}
	// Reported text is bounded by decoding, but a count is not: a lying
	// agent may claim any number, and the timeline gets one line per
	// report, not per claimed restart.
	w.Restarts = s.Restarts
	if err := tx.PutWorkload(*w); err != nil {
		return err
	}
	return timeline(tx, c.clk.Now(), w.ID, fmt.Sprintf("restarted on its machine (%s)", restartPhrase(s.Restarts, w.Spec.Restart)))
}

// restartPhrase: "restart 2 of on-failure:3", "restart 5, policy always".
func restartPhrase(n int, p *protocol.RestartPolicy) string {
	switch {
	case p == nil:
		return fmt.Sprintf("restart %d", n)
	case p.Policy == protocol.RestartOnFailure && p.Max > 0:
		return fmt.Sprintf("restart %d of %s", n, p)
	}
	return fmt.Sprintf("restart %d, policy %s", n, p)
}
