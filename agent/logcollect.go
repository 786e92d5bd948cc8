package agent

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	"einsora.dev/edge/agent/logs"
	"einsora.dev/edge/drivers"
)

// logSource is a driver that can follow a workload's output: every driver
// of this build is one.
type logSource interface {
	FollowLogs(ctx context.Context, workload string, since time.Time, emit func(drivers.LogLine)) error
}

// logFollowers tracks the workloads whose output is being copied into the
// agent's log store, one goroutine each.
type logFollowers struct {
	mu     sync.Mutex
	active map[string]*logFollow
	wg     sync.WaitGroup
}

type logFollow struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// openLogs opens the agent's log store under cfg.LogDir.
func openLogs(cfg Config) (*logs.Store, error) {
	dir := cfg.LogDir
	if dir == "" {
		dir = filepath.Join(cfg.StateDir, "logs")
	}
	return logs.Open(dir, logs.Options{MaxBytes: cfg.LogMaxBytes, Clock: cfg.Clock})
}

// Logs is the agent's store of workload output: what POST /agent/v1/logs
// streams from (Read for a tail, Follow for what comes next).
func (a *Agent) Logs() *logs.Store { return a.logs }

// followLogs starts copying the output of every starting or running
// instance that is not yet followed into the log store, resuming after the
// newest line kept. A follow ends by itself when its instance stops; a
// later pass starts another if it runs again.
func (a *Agent) followLogs(ctx context.Context, have map[string]instanceOf) {
	a.followers.mu.Lock()
	defer a.followers.mu.Unlock()
	if a.followers.active == nil {
		a.followers.active = map[string]*logFollow{}
	}
	for id, in := range have {
		if in.State != drivers.StateStarting && in.State != drivers.StateRunning {
			continue
		}
		src, ok := in.driver.(logSource)
		if !ok || a.followers.active[id] != nil {
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		f := &logFollow{cancel: cancel, done: make(chan struct{})}
		a.followers.active[id] = f
		a.followers.wg.Go(func() {
			defer close(f.done)
			defer cancel()
			err := src.FollowLogs(fctx, id, a.logs.Last(id), func(l drivers.LogLine) {
				if err := a.logs.Append(id, logs.Entry{Time: l.Time, Stream: logs.Stream(l.Stream), Line: l.Line}); err != nil {
					a.log.Warn("cannot keep a workload's output", "workload", id, "err", err)
				}
			})
			if err != nil && fctx.Err() == nil {
				a.log.Warn("following a workload's output failed; trying again at the next pass", "workload", id, "err", err)
			}
			a.followers.mu.Lock()
			defer a.followers.mu.Unlock()
			if a.followers.active[id] == f {
				delete(a.followers.active, id)
			}
		})
	}
}

// dropLogs ends the workload's follow and deletes its output: it goes with
// the workload.
func (a *Agent) dropLogs(id string) {
	a.followers.mu.Lock()
	f := a.followers.active[id]
	delete(a.followers.active, id)
	a.followers.mu.Unlock()
	if f != nil {
		// Waited for, so that no line it was writing brings the ring
		// back after it is deleted.
		f.cancel()
		<-f.done
	}
	if err := a.logs.Remove(id); err != nil {
		a.log.Warn("cannot delete a removed workload's output", "workload", id, "err", err)
	}
}
