package agent

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/sim"
)

// withdrawing is a sim driver that counts macOS guests as vz does, and
// whose OS can be made to refuse one below the limit.
type withdrawing struct {
	*sim.Driver
	refused atomic.Bool
}

func (w *withdrawing) MacOSCapacity() (int, string) {
	if w.refused.Load() {
		return 0, "macOS refused a guest with 1 of 2 running"
	}
	return 2, ""
}

// A driver that withdrew its limited capacity is named in the inventory,
// with a note saying why, and leaves it once the capacity is back.
func TestWithdrawnCapacityReported(t *testing.T) {
	f := newFakeHub()
	var w *withdrawing
	h := startAgent(t, t.TempDir(), f, func(c *Config) {
		d, _ := c.Drivers.Get(sim.Name)
		w = &withdrawing{Driver: d.(*sim.Driver)}
		w.refused.Store(true)
		c.Drivers = drivers.NewHost(w)
	})
	waitFor(t, "an inventory withdrawing sim's capacity", func() bool {
		inv := f.lastInventory()
		return inv != nil && slices.Equal(inv.Withdrawn, []string{sim.Name}) &&
			slices.ContainsFunc(inv.Notes, func(n string) bool { return strings.Contains(n, "macOS refused") })
	})
	w.refused.Store(false)
	h.agent.Reprobe()
	waitFor(t, "an inventory with the capacity back", func() bool {
		inv := f.lastInventory()
		return inv != nil && len(inv.Withdrawn) == 0
	})
}
