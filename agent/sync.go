package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/internal/atomicfile"
	"einsora.dev/edge/protocol"
)

// errStale: the hub answered with a desired state older than one already
// applied from the same store. It is ignored (an old list must never stop
// or delete what a newer one started), and the agent backs off rather than
// asking again at once.
var errStale = errors.New("stale desired state")

// statusEvery is how often the time of the last sync is written down.
const statusEvery = time.Minute

// maxClockSkew is how far the agent's clock may be from the hub's before it
// warns: a wrong clock must not pass for an expired certificate.
const maxClockSkew = time.Minute

func (a *Agent) syncLoop(ctx context.Context) {
	bo := a.cfg.Backoff
	// redirected is set by a directed reconnect and cleared by a sync
	// that succeeds: only the first of a row redials at once.
	redirected := false
	for ctx.Err() == nil {
		pollCtx, cancel := context.WithCancel(ctx)
		a.mu.Lock()
		a.news = false
		// News that came before now rides on this request.
		select {
		case <-a.newsCh:
		default:
		}
		req := a.requestLocked()
		a.mu.Unlock()
		var cutter sync.WaitGroup
		sent := a.clk.Now()
		cutter.Go(func() { a.cutOnNews(pollCtx, cancel, sent) })

		resp, err := a.cfg.Transport.Sync(pollCtx, req)

		a.mu.Lock()
		cutShort := a.news
		a.mu.Unlock()
		cancel()
		cutter.Wait()
		var logReqs []protocol.LogRequest
		if err == nil {
			// Log requests ride beside desired state: never saved with it.
			logReqs, resp.Logs = resp.Logs, nil
			err = a.accept(resp, req)
		}
		if err == nil && len(logReqs) > 0 {
			a.startUploads(ctx, logReqs)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if cutShort && errors.Is(err, context.Canceled) {
				continue // cut short on purpose, to deliver news
			}
			if errors.Is(err, hubclient.ErrReconnect) && !redirected {
				// The hub is draining or moving this agent: it was just
				// reachable, so redial without backoff: at once to another
				// replica, or after a random part of the window the hub
				// sized to its fleet when it is restarting itself.
				redirected = true
				var re *hubclient.ReconnectError
				if errors.As(err, &re) && re.Window > 0 {
					wait := time.Duration(rand.Int64N(int64(re.Window)))
					a.log.Info("the hub directed a reconnect to itself; redialling within its window", "detail", err, "wait", wait)
					clock.Sleep(a.clk, wait, ctx.Done())
					continue
				}
				a.log.Info("the hub directed a reconnect; redialling at once", "detail", err)
				continue
			}
			a.mu.Lock()
			first := a.lastSyncErr == nil
			a.lastSyncErr = err
			wasRevoked := a.revoked
			a.revoked = isRevoked(err) || wasRevoked && stillRefused(err)
			revoked := a.revoked
			a.mu.Unlock()
			if revoked {
				if !wasRevoked {
					a.revokedNow(err)
				}
				a.log.Debug("still revoked", "err", err, "retry_in", RevokedRetry)
				clock.Sleep(a.clk, RevokedRetry, ctx.Done())
				continue
			}
			wait := bo.Next()
			if msg, ok := simRefused(err); ok && first {
				a.log.Error(msg, "wait", wait)
			} else if first {
				a.log.Warn("sync failed; retrying with backoff, still applying the last desired state", "err", err, "wait", wait)
			} else {
				a.log.Debug("sync failed again", "err", err, "attempt", bo.Attempt(), "wait", wait)
			}
			clock.Sleep(a.clk, wait, ctx.Done())
			continue
		}
		bo.Reset()
		// After losing the hub, come back within the window it sized.
		bo.Window = hubclient.WindowOf(resp)
		redirected = false
		if !resp.Unchanged {
			a.awaitApplied(ctx, resp.Generation)
		}
	}
}

// cutOnNews cancels the sync of ctx when news arrives, but not before it
// has waited NewsGap since sent: news that comes in a burst (a start, then
// running a moment later) rides on one request, not one each.
func (a *Agent) cutOnNews(ctx context.Context, cancel context.CancelFunc, sent time.Time) {
	select {
	case <-ctx.Done():
		return
	case <-a.newsCh:
	}
	if wait := a.cfg.NewsGap - a.clk.Now().Sub(sent); wait > 0 && !clock.Sleep(a.clk, wait, ctx.Done()) {
		return
	}
	cancel()
}

// awaitApplied waits, at most NewsGap, for the apply loop to finish a pass
// over desired generation gen, so the next sync reports what it did:
// polling at once would hold a request the pass's news then cuts short.
func (a *Agent) awaitApplied(ctx context.Context, gen int64) {
	t := a.clk.NewTimer(a.cfg.NewsGap)
	defer t.Stop()
	for {
		a.mu.Lock()
		done := a.appliedGen == gen
		a.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			return
		case <-a.newsCh:
		}
	}
}

// requestLocked builds the report: every status, and the inventory when
// the hub has not yet acknowledged it.
func (a *Agent) requestLocked() *protocol.SyncRequest {
	req := &protocol.SyncRequest{
		ProtocolVersion:   protocol.Version,
		AgentVersion:      a.cfg.Version,
		AppliedGeneration: a.appliedGen,
		BootID:            a.bootID,
		AgentStarted:      a.started,
		PreviousStoreID:   a.prevStoreID,
		Statuses:          make([]protocol.Status, 0, len(a.statuses)),
	}
	if d := a.state.Desired; d != nil {
		req.StoreID, req.Generation = d.StoreID, d.Generation
	}
	for _, s := range a.statuses {
		req.Statuses = append(req.Statuses, s)
	}
	sort.Slice(req.Statuses, func(i, j int) bool { return req.Statuses[i].Workload < req.Statuses[j].Workload })
	if a.invHash != a.invAcked {
		req.Inventory = a.inventory
	}
	req.HubsDigest = protocol.HubsDigest(a.state.Hubs)
	return req
}

// accept takes the hub's answer to req.
func (a *Agent) accept(resp *protocol.SyncResponse, req *protocol.SyncRequest) error {
	if resp == nil {
		return errors.New("sync: empty answer")
	}
	if err := checkHubProtocol(resp.ProtocolVersion, int(ownProtocol.Load())); err != nil {
		return err
	}
	now := a.clk.Now()
	if !resp.HubTime.IsZero() {
		if skew := now.Sub(resp.HubTime); skew > maxClockSkew || skew < -maxClockSkew {
			a.log.Warn("this machine's clock differs from the hub's; fix its time (NTP) or certificates will look expired",
				"skew", skew.Round(time.Second))
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lastSyncErr != nil {
		a.log.Info("sync recovered")
	}
	if a.revoked {
		a.revoked = false
		a.log.Info("the hub accepts this machine again")
		if err := clearRevoked(a.cfg.StateDir); err != nil {
			a.log.Warn("cannot clear the revocation for einsora-agent status", "err", err)
		}
	}
	if now.Sub(a.lastSync) >= statusEvery {
		// For `einsora-agent status`, which runs apart from the agent;
		// written at most once a minute so an idle agent does not write
		// on every poll.
		if err := atomicfile.Write(filepath.Join(a.cfg.StateDir, lastSyncFile), []byte(now.UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
			a.log.Warn("cannot record the last sync", "err", err)
		}
	}
	a.lastSync, a.lastSyncErr = now, nil
	if req.Inventory != nil && req.Inventory == a.inventory {
		// The hub has this inventory; a newer one probed meanwhile is
		// still sent next time.
		a.invAcked = a.invHash
	}
	if req.PreviousStoreID != "" && a.prevStoreID == req.PreviousStoreID {
		a.prevStoreID = ""
	}
	// The replicas' URLs ride beside desired state, on any answer: kept
	// apart from it.
	hubs := resp.Hubs
	resp.Hubs = nil
	if len(hubs) > 0 {
		a.learnHubsLocked(hubs)
	}
	if resp.Unchanged {
		return nil
	}
	known := a.state.Desired
	switch {
	case known != nil && resp.StoreID != known.StoreID:
		a.log.Error("THE HUB'S STORE CHANGED: its database was replaced or restored; keeping every workload it no longer lists, stopped, never deleted",
			"previous_store", known.StoreID, "store", resp.StoreID)
		a.prevStoreID = known.StoreID
	case known != nil && resp.Generation < known.Generation:
		a.log.Warn("ignoring desired state older than the one applied", "generation", resp.Generation, "applied", known.Generation)
		return fmt.Errorf("%w: generation %d after %d", errStale, resp.Generation, known.Generation)
	}
	prev := a.state.Desired
	a.state.Desired = resp
	if err := saveState(a.cfg.StateDir, a.state); err != nil {
		a.state.Desired = prev
		return fmt.Errorf("sync: %w", err)
	}
	select {
	case a.wakeApply <- struct{}{}:
	default:
	}
	return nil
}

// revokedNow says once, at ERROR, that the hub revoked this machine and what
// to do, and records it for `status` and `doctor`.
func (a *Agent) revokedNow(err error) {
	hubURL := ""
	if e, rerr := ReadEnrollment(a.cfg.StateDir); rerr == nil {
		hubURL = e.HubURL
	}
	help := revokedHelp(hubURL)
	a.log.Error(help, "err", err, "retry_every", RevokedRetry)
	if werr := writeRevoked(a.cfg.StateDir, Revocation{At: a.clk.Now().UTC(), Message: help}); werr != nil {
		a.log.Warn("cannot record the revocation for einsora-agent status", "err", werr)
	}
}

// learnHubsLocked keeps the replicas' URLs the hub sent, bounded, and
// tells OnHubs. A list that cannot be saved is still used until the agent
// stops.
func (a *Agent) learnHubsLocked(urls []string) {
	kept, dropped := protocol.KeepHubs(urls)
	if dropped > 0 {
		a.log.Warn("the hub sent replica URLs this agent does not keep (over the bound, repeated, not https://HOST:PORT)",
			"dropped", dropped, "max", protocol.MaxHubs)
	}
	if len(kept) == 0 || slices.Equal(kept, a.state.Hubs) {
		return
	}
	a.log.Info("hub replicas learned from the hub", "urls", kept)
	a.state.Hubs = kept
	if err := saveState(a.cfg.StateDir, a.state); err != nil {
		a.log.Warn("cannot save the hub replicas' URLs; using them until the agent stops", "err", err)
	}
	if a.cfg.OnHubs != nil {
		a.cfg.OnHubs(slices.Clone(kept))
	}
}
