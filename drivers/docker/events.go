package docker

import (
	"context"
	"time"

	"github.com/moby/moby/client"
)

// Bounds of the wait before the event stream is opened again after it
// failed (the engine restarting, its socket gone).
const (
	eventsRetryMin = time.Second
	eventsRetryMax = 30 * time.Second
)

// watchedActions are the container events that change what List reports.
// Exec and health-check probes (exec_create, exec_start, exec_die) are left
// out: a health check every few seconds would wake the agent as often as
// polling did.
var watchedActions = []string{"create", "start", "restart", "die", "stop", "kill", "oom", "pause", "unpause", "destroy", "rename", "health_status"}

// Changes returns a channel that receives a value soon after the engine
// reports a change to one of the driver's own containers (its labels, this
// machine's), so a caller can look with List at once instead of polling.
// Values coalesce: one waiting value stands for any number of changes. When
// the event stream is (re)opened a value is sent too, since changes may
// have been missed while it was closed. The stream ends with Close.
func (d *Driver) Changes() <-chan struct{} {
	d.changesOnce.Do(func() {
		d.changes = make(chan struct{}, 1)
		d.wg.Go(d.watchEvents)
	})
	return d.changes
}

func (d *Driver) notifyChange() {
	select {
	case d.changes <- struct{}{}:
	default:
	}
}

// watchEvents follows the engine's event stream until Close, opening it
// again with a capped backoff when it fails.
func (d *Driver) watchEvents() {
	f := d.filters().Add("type", "container")
	for _, a := range watchedActions {
		f = f.Add("event", a)
	}
	wait := eventsRetryMin
	for d.ctx.Err() == nil {
		ctx, cancel := context.WithCancel(d.ctx)
		res := d.cli.Events(ctx, client.EventsListOptions{Filters: f})
		// Whatever happened while the stream was closed is unknown.
		d.notifyChange()
		err := d.drainEvents(res, &wait)
		cancel()
		if d.ctx.Err() != nil {
			return
		}
		d.log.Debug("the engine's event stream ended; opening it again", "err", err, "wait", wait)
		t := time.NewTimer(wait)
		select {
		case <-d.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, eventsRetryMax)
	}
}

// settle waits until the engine's view holds the change an event
// announced. The engine sends "die" before the container's state says it
// exited (seen on 20.10: List still said running), while it holds the
// container's lock; an inspect takes that lock, so it returns only once
// the exit is in place. An error (the container gone) settles too.
func (d *Driver) settle(id string) {
	if id == "" {
		return
	}
	ctx, cancel := d.call(d.ctx)
	defer cancel()
	d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
}

// drainEvents forwards the stream's events as changes until it fails. An
// event resets the retry wait: the stream worked.
func (d *Driver) drainEvents(res client.EventsResult, wait *time.Duration) error {
	for {
		select {
		case m := <-res.Messages:
			*wait = eventsRetryMin
			d.settle(m.Actor.ID)
			d.notifyChange()
		case err := <-res.Err:
			return err
		}
	}
}
