package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/protocol"
)

// pending is a workload that has no container yet: its image is being
// pulled (StateStarting), or it failed before a container was made
// (StateFailed). It lives in memory only; after an agent restart the
// agent's next Start pulls again.
type pending struct {
	attempt  int64
	state    drivers.State
	code     protocol.Code
	progress string
	detail   string
	cancel   context.CancelFunc
	done     chan struct{}
}

// setFailed records that spec could not be started before a container
// was made.
func (d *Driver) setFailed(spec drivers.Spec, code protocol.Code, detail string) {
	done := make(chan struct{})
	close(done)
	d.mu.Lock()
	d.pending[spec.Workload] = &pending{
		attempt: spec.Attempt, state: drivers.StateFailed, code: code,
		detail: clip(detail), cancel: func() {}, done: done,
	}
	d.mu.Unlock()
	d.log.Warn("start failed", "workload", spec.Workload, "attempt", spec.Attempt, "code", code, "detail", detail)
}

// startPull pulls spec.Image in the background, then creates and starts
// the container. Start returns meanwhile; List shows the progress.
func (d *Driver) startPull(spec drivers.Spec, hc *container.HostConfig) {
	ctx, cancel := context.WithTimeout(d.ctx, d.pullTimeout)
	p := &pending{
		attempt: spec.Attempt, state: drivers.StateStarting, progress: "pulling",
		cancel: cancel, done: make(chan struct{}),
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		cancel()
		return
	}
	d.pending[spec.Workload] = p
	d.wg.Add(1)
	d.mu.Unlock()
	d.log.Info("pulling image", "workload", spec.Workload, "image", spec.Image)
	go func() {
		defer d.wg.Done()
		defer close(p.done)
		defer cancel()
		d.pull(ctx, spec, hc, p)
	}()
}

func (d *Driver) pull(ctx context.Context, spec drivers.Spec, hc *container.HostConfig, p *pending) {
	w := spec.Workload
	err := d.pullImage(ctx, spec.Image, func(progress string) {
		d.mu.Lock()
		p.progress = progress
		d.mu.Unlock()
	})
	if ctx.Err() != nil && d.ctx.Err() == nil && d.current(w, p) {
		err = fmt.Errorf("pull timed out after %v", d.pullTimeout)
	}
	if err != nil {
		d.finish(w, p, protocol.CodeImageUnavailable, fmt.Sprintf("pull %s: %v", spec.Image, err))
		return
	}
	d.mu.Lock()
	if d.pending[w] != p {
		d.mu.Unlock()
		return // stopped or removed meanwhile
	}
	spec.Attempt = p.attempt
	p.progress = "creating"
	d.mu.Unlock()

	err = d.createAndStart(ctx, spec, hc)
	if errors.Is(err, errNoImage) {
		err = errors.New("image still missing after pull")
	}
	if err != nil {
		d.finish(w, p, protocol.CodeFailedStart, err.Error())
		return
	}
	d.finish(w, p, "", "")
}

// current reports whether p is still the workload's pending entry.
func (d *Driver) current(w string, p *pending) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending[w] == p
}

// finish ends p: dropped on success, failed with code otherwise.
func (d *Driver) finish(w string, p *pending, code protocol.Code, detail string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending[w] != p {
		return
	}
	if code == "" {
		delete(d.pending, w)
		return
	}
	p.state, p.code, p.progress, p.detail = drivers.StateFailed, code, "", clip(detail)
	d.log.Warn("start failed", "workload", w, "attempt", p.attempt, "code", code, "detail", detail)
}

// dropPending forgets w's pending entry, cancelling its pull and waiting
// for it to end, so the caller sees any container it made.
func (d *Driver) dropPending(ctx context.Context, w string) error {
	d.mu.Lock()
	p := d.pending[w]
	delete(d.pending, w)
	d.mu.Unlock()
	if p == nil {
		return nil
	}
	p.cancel()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cancel pull: %w", ctx.Err())
	}
}

// pullImage pulls ref, reporting progress as it goes.
func (d *Driver) pullImage(ctx context.Context, ref string, report func(string)) error {
	resp, err := d.cli.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return d.wrap(ctx, "pull", err)
	}
	var t pullTracker
	for m, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return d.wrap(ctx, "pull", err)
		}
		if m.Error != nil {
			return errors.New(m.Error.Message)
		}
		if t.add(m) {
			report(t.String())
		}
	}
	return nil
}

// pullTracker counts the layers of a pull from its progress messages.
type pullTracker struct {
	ids  []string
	done map[string]bool
}

// layerStatus lists the statuses a pull reports per layer; true marks the
// final ones.
var layerStatus = map[string]bool{
	"Pulling fs layer":   false,
	"Waiting":            false,
	"Downloading":        false,
	"Verifying Checksum": false,
	"Download complete":  false,
	"Extracting":         false,
	"Pull complete":      true,
	"Already exists":     true,
}

// add takes one message and reports whether the summary changed.
func (t *pullTracker) add(m jsonstream.Message) bool {
	final, isLayer := layerStatus[strings.TrimSpace(m.Status)]
	if !isLayer || m.ID == "" {
		return false
	}
	if t.done == nil {
		t.done = make(map[string]bool)
	}
	was, seen := t.done[m.ID]
	if !seen {
		t.ids = append(t.ids, m.ID)
	}
	t.done[m.ID] = was || final
	return !seen || was != t.done[m.ID]
}

func (t *pullTracker) String() string {
	n := 0
	for _, id := range t.ids {
		if t.done[id] {
			n++
		}
	}
	return fmt.Sprintf("pulling: %d/%d layers", n, len(t.ids))
}
