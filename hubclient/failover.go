package hubclient

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"

	"einsora.dev/edge/protocol"
)

// Failover is the sync transport of an agent that knows several hub
// replicas: when a sync fails for the hub's side (a 5xx, a connection
// refused, reset or timed out), the next sync goes to the next replica,
// on new connections. The agent's jittered backoff paces the attempts, as
// with one hub. Renewals go through the HTTPS transport, to whichever
// replica it dials now.
type Failover struct {
	t *HTTPS
	// given is the replicas it was made with (the enrolled hub, then
	// --hub): always tried first, whatever the hub says.
	given []string
	// mu guards the following fields.
	mu   sync.Mutex
	urls []string
	next int
}

var _ Transport = (*Failover)(nil)

// NewFailover returns t failing over among urls (the hub's agent URLs,
// checked as ParseHubURL does); t's own URL is added first if missing.
func NewFailover(t *HTTPS, urls []string) (*Failover, error) {
	all := []string{t.URL()}
	for _, raw := range urls {
		u, err := ParseHubURL(raw)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(all, u.String()) {
			all = append(all, u.String())
		}
	}
	t.SetReplicated(len(all) > 1)
	return &Failover{t: t, given: all, urls: slices.Clone(all), next: 1 % len(all)}, nil
}

// SetLearned sets the replicas learned from the hub (SyncResponse.Hubs),
// tried after the given ones; URLs ParseHubURL refuses are left out.
func (f *Failover) SetLearned(urls []string) {
	all := slices.Clone(f.given)
	for _, raw := range urls {
		if u, err := ParseHubURL(raw); err == nil && !slices.Contains(all, u.String()) {
			all = append(all, u.String())
		}
	}
	// Next after the one in use (-1 + 1 = the first when it is none of
	// them: a directed reconnect took it elsewhere).
	cur := slices.Index(all, f.t.URL())
	f.t.SetReplicated(len(all) > 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.urls = all
	f.next = (cur + 1) % len(all)
}

// Sync syncs through the replica in use, moving on to the next after a
// failure of the hub's side.
func (f *Failover) Sync(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
	resp, err := f.t.Sync(ctx, req)
	if err != nil && ctx.Err() == nil && hubSideFailure(err) {
		f.mu.Lock()
		if len(f.urls) == 1 {
			// Nowhere else to go: the transport redials as it would
			// without failover.
			f.mu.Unlock()
			return resp, err
		}
		to := f.urls[f.next]
		f.next = (f.next + 1) % len(f.urls)
		f.mu.Unlock()
		if _, rerr := f.t.redirect(to); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
	}
	return resp, err
}

// URLs is the replicas it fails over among, the first one it started on.
func (f *Failover) URLs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.urls)
}

// hubSideFailure reports whether err is the hub's failure, which another
// replica may not share: a 5xx answer, or a connection that could not be
// made or was lost. The agent's own mistakes (4xx) and a refused
// certificate are the same on every replica.
func hubSideFailure(err error) bool {
	var he *HubError
	if errors.As(err, &he) {
		return he.Code >= 500
	}
	var pe *PinError
	if errors.As(err, &pe) {
		return false
	}
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &oe) || errors.As(err, &ne) || closedEarly(err)
}
