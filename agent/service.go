package agent

import (
	"context"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// NotifyService tells systemd (Type=notify) that the agent is ready, then
// feeds its watchdog for as long as the apply loop keeps passing, so a
// wedged agent is restarted rather than left looking alive. Without systemd
// it does nothing. It returns when ctx is done.
func (a *Agent) NotifyService(ctx context.Context) {
	if ok, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		a.log.Warn("cannot tell systemd the agent is ready", "err", err)
	} else if !ok {
		return // not under systemd
	}
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return
	}
	// An apply pass is never longer apart than its interval plus one
	// bounded driver call per workload; allow a wide margin of that.
	stale := 3*a.cfg.ApplyInterval + 2*a.cfg.DriverTimeout
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			daemon.SdNotify(false, daemon.SdNotifyStopping)
			return
		case <-t.C:
		}
		last := time.Unix(0, a.lastPass.Load())
		if time.Since(last) > stale {
			a.log.Error("apply loop has not passed in time; letting systemd's watchdog restart the agent", "last_pass", last)
			continue
		}
		daemon.SdNotify(false, daemon.SdNotifyWatchdog)
	}
}
