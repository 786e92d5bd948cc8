package hub

import (
	"slices"
	"time"

	"einsora.dev/edge/hub/store"
)

// SimDriver is the driver that runs nothing: it only pretends to.
const SimDriver = "sim"

// offersSim reports whether m's last inventory offers the sim driver.
func offersSim(m store.Machine) bool {
	return m.Inventory != nil && slices.Contains(m.Inventory.Drivers, SimDriver)
}

// view derives what the admin views show of m: a revoked machine is never
// online, whatever its last sync says.
func (h *Hub) view(m store.Machine) MachineView {
	v := MachineView{Machine: m, Sim: offersSim(m)}
	v.Online = !m.Revoked && h.presence.online(m)
	if !v.Online {
		v.OfflineSince = m.LastSync
		if v.OfflineSince.IsZero() {
			v.OfflineSince = m.Registered
		}
		if m.Revoked && m.RevokedAt.Before(v.OfflineSince) && !m.RevokedAt.IsZero() {
			v.OfflineSince = m.RevokedAt
		}
	}
	return v
}

// UnknownSince says since when a workload's state is unknown: the time its
// machine went silent, when the workload is one the machine holds
// (provisioning, running or stopping) and the machine is offline or
// revoked; zero otherwise. The stored state is then only what the machine
// last reported, not what it does now.
func UnknownSince(w store.Workload, m MachineView) time.Time {
	if w.Machine == "" || w.Machine != m.ID || m.Online {
		return time.Time{}
	}
	switch w.State {
	case store.StateProvisioning, store.StateRunning, store.StateStopping:
		return m.OfflineSince
	}
	return time.Time{}
}
