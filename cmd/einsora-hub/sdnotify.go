package main

import (
	"log/slog"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifyReady tells systemd (Type=notify) that the hub serves. It is called
// from serve's Ready, which comes once the store has answered (hub.New
// writes the seed classes through it) and both listeners are bound, so a
// unit ordered after einsora-hub finds both APIs accepting. Without
// NOTIFY_SOCKET it does nothing.
func notifyReady(log *slog.Logger, adminURL, agentURL string) {
	msg := daemon.SdNotifyReady + "\nSTATUS=admin API on " + adminURL + ", agents connect to " + agentURL
	if _, err := daemon.SdNotify(false, msg); err != nil {
		log.Warn("cannot tell systemd the hub is ready", "err", err)
	}
}
