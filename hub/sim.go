package hub

import (
	"errors"
	"fmt"
	"slices"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// ErrSimRefused: the machine offers the sim driver and this hub was not
// started with --allow-sim. A production hub must not place work on a
// driver that only pretends to run it.
var ErrSimRefused = errors.New("this hub does not accept the sim driver, which runs nothing; start the agent with real drivers, or the hub with --allow-sim")

// refuseSim refuses a report from a machine that offers sim, by the
// inventory it sends now or, when it sends none, the one stored.
func (h *Hub) refuseSim(m store.Machine, inv *protocol.Inventory) error {
	if h.cfg.AllowSim {
		return nil
	}
	if inv != nil && slices.Contains(inv.Drivers, SimDriver) || inv == nil && offersSim(m) {
		return fmt.Errorf("sync %s: %w", m.ID, ErrSimRefused)
	}
	return nil
}
