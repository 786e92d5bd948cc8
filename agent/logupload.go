package agent

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	"einsora.dev/edge/agent/logs"
	"einsora.dev/edge/protocol"
)

// logUploader is a transport that can upload a workload's output to the
// hub (hubclient.HTTPS); the in-process transport of solo is not one, as
// solo's hub reads the agent's log store directly (StreamLogs).
type logUploader interface {
	UploadLogs(ctx context.Context, token string, body io.Reader) error
}

// logURLUploader is a transport that can also upload to another hub
// replica than its own (protocol.LogRequest.URL), with the same
// certificate and pinned CA. One that cannot uploads to its hub, as
// agents that predate the URL do.
type logURLUploader interface {
	UploadLogsTo(ctx context.Context, url, token string, body io.Reader) error
}

// maxUploads bounds the uploads one agent runs at once; the hub bounds
// its requests too.
const maxUploads = 2 * protocol.MaxLogRequests

// uploads tracks the running uploads by token, so that a request repeated
// in a later answer starts nothing new.
type uploads struct {
	mu     sync.Mutex
	active map[string]bool
	wg     sync.WaitGroup
	// up uploads; nil: the transport, if it can.
	up logUploader
}

func (u *uploads) setUploader(up logUploader) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.up = up
}

// startUploads starts one upload per log request not already running.
func (a *Agent) startUploads(ctx context.Context, reqs []protocol.LogRequest) {
	a.uploads.mu.Lock()
	up := a.uploads.up
	a.uploads.mu.Unlock()
	if up == nil {
		up, _ = a.cfg.Transport.(logUploader)
	}
	if up == nil {
		a.log.Warn("the hub asked for workload output, but this agent's transport cannot upload it", "requests", len(reqs))
		return
	}
	a.uploads.mu.Lock()
	defer a.uploads.mu.Unlock()
	if a.uploads.active == nil {
		a.uploads.active = map[string]bool{}
	}
	for _, r := range reqs[:min(len(reqs), protocol.MaxLogRequests)] {
		if r.Token == "" || a.uploads.active[r.Token] {
			continue
		}
		if !a.knows(r.Workload) {
			a.log.Warn("the hub asked for the output of a workload this agent does not hold; ignored", "workload", r.Workload)
			continue
		}
		if r.URL != "" && protocol.CheckHubURL(r.URL) != nil {
			// Never sent anywhere but over pinned TLS, nor grown without bound.
			a.log.Warn("the hub asked for workload output to be sent to a URL that is not https:// or is too long; ignored",
				"workload", r.Workload, "url_bytes", len(r.URL))
			continue
		}
		if len(a.uploads.active) >= maxUploads {
			a.log.Warn("too many uploads of workload output at once; skipping one", "workload", r.Workload)
			continue
		}
		a.uploads.active[r.Token] = true
		a.uploads.wg.Go(func() {
			defer func() {
				a.uploads.mu.Lock()
				delete(a.uploads.active, r.Token)
				a.uploads.mu.Unlock()
			}()
			// One try: the replica that asked gives up within seconds, and
			// a user asks again.
			if err := a.upload(ctx, up, r); err != nil && ctx.Err() == nil {
				if r.URL != "" {
					a.log.Warn("upload of workload output to the hub replica that asked for it failed", "workload", r.Workload, "url", r.URL, "err", err)
				} else {
					a.log.Info("upload of workload output ended", "workload", r.Workload, "err", err)
				}
			}
		})
	}
}

// upload streams the workload's output as LogLine JSON lines into the
// request body until the hub closes the request, the workload is removed
// (a follow) or the kept lines are sent (no follow).
func (a *Agent) upload(ctx context.Context, up logUploader, r protocol.LogRequest) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	go func() {
		enc := json.NewEncoder(pw)
		err := a.StreamLogs(ctx, r, func(l protocol.LogLine) error { return enc.Encode(l) })
		pw.CloseWithError(err)
	}()
	var err error
	if to, ok := up.(logURLUploader); ok && r.URL != "" {
		err = to.UploadLogsTo(ctx, r.URL, r.Token, pr)
	} else {
		err = up.UploadLogs(ctx, r.Token, pr)
	}
	// The hub is done reading: end the stream, unblocking its writes.
	pr.Close()
	return err
}

// StreamLogs sends the workload's kept output that req asks for (Tail
// lines, at or after Since) to emit and, with Follow, each line as it comes
// until ctx ends or the workload's output is removed with it. An error of
// emit ends it. solo's hub calls it in-process; uploads call it for the
// networked hub.
func (a *Agent) StreamLogs(ctx context.Context, req protocol.LogRequest, emit func(protocol.LogLine) error) error {
	if !a.knows(req.Workload) {
		// Removed (or never here): nothing to send, and a follow must not
		// make an empty ring for it that nothing would remove.
		return nil
	}
	var follow <-chan logs.Entry
	if req.Follow {
		// Followed before the kept lines are read, so none falls between.
		ch, err := a.logs.Follow(ctx, req.Workload)
		if err != nil {
			return err
		}
		follow = ch
	}
	es, err := a.logs.Read(req.Workload, req.Tail, req.Since)
	if err != nil {
		return err
	}
	var last time.Time
	for _, e := range es {
		if err := emit(protocol.LogLine{Time: e.Time, Stream: string(e.Stream), Line: e.Line}); err != nil {
			return err
		}
		last = e.Time
	}
	if follow == nil {
		return nil
	}
	for {
		select {
		case e, ok := <-follow:
			if !ok {
				return nil // removed with its workload, or the agent closes
			}
			if !e.Time.After(last) && len(es) > 0 {
				continue // read above already
			}
			if err := emit(protocol.LogLine{Time: e.Time, Stream: string(e.Stream), Line: e.Line}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// knows reports whether the agent holds workload id or was told of it:
// only those have output, and only their rings may be made.
func (a *Agent) knows(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.state.Workloads[id]; ok {
		return true
	}
	if a.state.Desired != nil {
		for _, w := range a.state.Desired.Workloads {
			// One listed for removal and no longer held is gone.
			if w.ID == id && w.Mode != protocol.ModeRemove {
				return true
			}
		}
	}
	return false
}
