package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/protocol"
)

// Restart backoff defaults: the first restart waits DefaultRestartBackoff,
// each next one twice as long, up to DefaultRestartBackoffMax.
const (
	DefaultRestartBackoff    = time.Second
	DefaultRestartBackoffMax = time.Minute
)

// restartBook decides local restarts under a workload's restart policy.
// The count of restarts of an attempt is kept in the agent's state (held),
// so on-failure:N holds across agent restarts; when the next restart is due
// is kept only here: after an agent restart the wait begins again.
type restartBook struct {
	mu  sync.Mutex
	due map[string]pendingRestart
}

type pendingRestart struct {
	attempt int64
	at      time.Time
}

// restartDecision is what to do with one workload this pass.
type restartDecision int

const (
	restartNone restartDecision = iota // report what is observed
	restartWait                        // a restart is due later
	restartNow                         // start it again now
)

// decideRestart says whether the instance of attempt dw.Attempt, observed
// as in, is to be restarted under dw's policy, given count restarts so far.
// It remembers when a restart becomes due, so the backoff begins at the
// first pass that saw the exit.
func (b *restartBook) decide(clk clock.Clock, base, limit time.Duration, dw protocol.DesiredWorkload, in drivers.Instance, has bool, count int) (restartDecision, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.due == nil {
		b.due = map[string]pendingRestart{}
	}
	if !has || in.Attempt != dw.Attempt || in.State != drivers.StateExited || !wantsRestart(dw.Restart, in, count) {
		delete(b.due, dw.ID)
		return restartNone, time.Time{}
	}
	now := clk.Now()
	p, ok := b.due[dw.ID]
	if !ok || p.attempt != dw.Attempt {
		p = pendingRestart{attempt: dw.Attempt, at: now.Add(backoff(base, limit, count))}
		b.due[dw.ID] = p
	}
	if now.Before(p.at) {
		return restartWait, p.at
	}
	delete(b.due, dw.ID)
	return restartNow, p.at
}

// next is when the earliest waiting restart is due; zero when none waits.
// The apply loop passes by then, however long its periodic pass (30 s when
// every driver notifies changes: a restart's backoff is no change of the
// runtime's).
func (b *restartBook) next() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var at time.Time
	for _, p := range b.due {
		if at.IsZero() || p.at.Before(at) {
			at = p.at
		}
	}
	return at
}

// wantsRestart applies the policy to an exited instance.
func wantsRestart(r *protocol.RestartPolicy, in drivers.Instance, count int) bool {
	if r == nil {
		return false
	}
	switch r.Policy {
	case protocol.RestartAlways:
		return true
	case protocol.RestartOnFailure:
		failed := in.ExitCode != 0 || in.OOMKilled
		return failed && (r.Max == 0 || count < r.Max)
	}
	return false
}

// backoff is base doubled count times, at most limit.
func backoff(base, limit time.Duration, count int) time.Duration {
	d := base
	for range count {
		if d >= limit/2 {
			return limit
		}
		d *= 2
	}
	return min(d, limit)
}

// restartLocal applies dw's restart policy to a started attempt whose
// status observeRun has set in s. It sets s.Restarts, and while a restart
// waits for its backoff reports the attempt as starting (it is not over).
// It reports whether it asked the driver to start the workload again.
func (a *Agent) restartLocal(ctx context.Context, dw protocol.DesiredWorkload, d drivers.Driver, in instanceOf, has bool, s *protocol.Status) bool {
	a.mu.Lock()
	h := a.state.Workloads[dw.ID]
	count := 0
	if h != nil && h.StartedAttempt == dw.Attempt {
		count = h.Restarts
	}
	a.mu.Unlock()
	s.Restarts = count
	base, limit := a.cfg.RestartBackoff, a.cfg.RestartBackoffMax
	if base <= 0 {
		base = DefaultRestartBackoff
	}
	if limit <= 0 {
		limit = DefaultRestartBackoffMax
	}
	decision, _ := a.restarts.decide(a.clk, base, limit, dw, in.Instance, has, count)
	exit := fmt.Sprintf("exited with code %d", in.ExitCode)
	if in.OOMKilled {
		exit = "was killed for memory"
	}
	switch decision {
	case restartWait:
		s.Code, s.ExitCode = protocol.CodeStarting, nil
		// The wait, not the time left: the status must not change at
		// every pass, or each pass would cut a sync short.
		s.Detail = fmt.Sprintf("%s; restart %d after %s", exit, count+1, backoff(base, limit, count))
		return false
	case restartNone:
		return false
	}
	// Counted durably before the driver is asked, like an attempt, so
	// on-failure:N never runs it more than N+1 times.
	if err := a.recordRestart(dw.ID, dw.Attempt, count+1); err != nil {
		a.log.Error("cannot record restart; not restarting", "workload", dw.ID, "err", err)
		return false
	}
	a.log.Info("restarting workload under its restart policy", "workload", dw.ID, "attempt", dw.Attempt,
		"restart", count+1, "policy", dw.Restart.String(), "exit_code", in.ExitCode, "oom_killed", in.OOMKilled)
	spec := drivers.Spec{Workload: dw.ID, Attempt: dw.Attempt, Kind: dw.Kind, Image: dw.Image, Resources: dw.Resources, WorkloadSpec: dw.WorkloadSpec}
	err := a.drive(ctx, "restart", d, dw.ID, func(ctx context.Context) error { return d.Start(ctx, spec) })
	s.Code, s.ExitCode, s.Restarts = protocol.CodeStarting, nil, count+1
	s.Detail = fmt.Sprintf("%s; restart %d", exit, count+1)
	if err != nil {
		s.Detail = bounded(err.Error())
		if !errors.Is(err, errTimeout) && !errors.Is(err, errBusy) && ctx.Err() == nil {
			s.Code = protocol.CodeFailedStart
		}
	}
	return true
}

func (a *Agent) recordRestart(id string, attempt int64, count int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.state.Workloads[id]
	if h == nil || h.StartedAttempt != attempt {
		return fmt.Errorf("workload %s attempt %d is not recorded as started", id, attempt)
	}
	prev := h.Restarts
	h.Restarts = count
	if err := saveState(a.cfg.StateDir, a.state); err != nil {
		h.Restarts = prev
		return err
	}
	return nil
}
