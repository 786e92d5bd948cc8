package hub

import (
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/trust"
	"einsora.dev/edge/protocol"
)

// checkInventory applies the trust rules to a reported inventory: it must
// fit the machine as registered, and it is bounded before it is stored.
func (h *Hub) checkInventory(m *store.Machine, inv *protocol.Inventory) error {
	err := trust.CheckInventory(m.OS, m.Arch, inv, func(name string) (string, bool) {
		d, ok := h.drivers[name]
		return d.OS, ok
	})
	if err != nil {
		return err
	}
	trust.Sanitize(inv)
	return nil
}
