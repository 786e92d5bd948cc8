package agent

import (
	"slices"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/protocol"
)

// macOSCapacity is a driver that counts a limited resource itself: vz,
// whose macOS guests the OS caps, and whose refusals can stick below the
// cap.
type macOSCapacity interface {
	MacOSCapacity() (free int, why string)
}

// withdrawCapacity tells the hub, in inv, which offered drivers have
// withdrawn their limited capacity for now, and why in a note.
func withdrawCapacity(inv *protocol.Inventory, host *drivers.Host) {
	for _, d := range host.All() {
		c, ok := d.(macOSCapacity)
		if !ok || !slices.Contains(inv.Drivers, d.Name()) {
			continue
		}
		if _, why := c.MacOSCapacity(); why != "" {
			inv.Withdrawn = append(inv.Withdrawn, d.Name())
			inv.Notes = append(inv.Notes, d.Name()+": no macOS VM capacity offered for now: "+why)
		}
	}
}
