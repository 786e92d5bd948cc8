package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/protocol"
)

// want is what desired state asks of a workload, as the apply loop sees
// it: a run splits in two, since an attempt is started at most once.
type want string

const (
	wantRunNew     want = "run-new"     // run an attempt not yet started
	wantRunStarted want = "run-started" // run an attempt already started
	wantPark       want = "park"
	wantRemove     want = "remove"
	wantUnlisted   want = "unlisted" // held, but desired state does not list it
)

// observed is what the driver shows: a drivers.State, or absent.
type observed string

const absent observed = "absent"

var observedStates = []observed{absent, observed(drivers.StateStarting), observed(drivers.StateRunning),
	observed(drivers.StateStopping), observed(drivers.StateStopped), observed(drivers.StateExited), observed(drivers.StateFailed)}

type action int

const (
	report action = iota + 1 // nothing to do but say what is seen
	start
	stop
	remove
)

// transitions is the apply loop's table: what is wanted × what is observed
// → what to do. Every pair has an entry (TestTransitionsComplete).
var transitions = map[want]map[observed]action{
	// A new attempt starts whatever the driver shows: Start restarts a
	// stopped instance with its data, and is a no-op on a live one.
	wantRunNew: all(start),
	// A started attempt is never started again: its end is reported, and
	// the hub decides whether there is a new attempt.
	wantRunStarted: all(report),
	wantPark: with(report, map[observed]action{
		observed(drivers.StateStarting): stop,
		observed(drivers.StateRunning):  stop,
	}),
	// Removal is the only way data is deleted.
	wantRemove: with(remove, map[observed]action{absent: report}),
	// What is not listed is stopped and kept: a list leaves a workload out
	// only by mistake, and deleting data is never the safe guess.
	wantUnlisted: with(report, map[observed]action{
		observed(drivers.StateStarting): stop,
		observed(drivers.StateRunning):  stop,
	}),
}

func all(a action) map[observed]action { return with(a, nil) }

func with(def action, except map[observed]action) map[observed]action {
	m := make(map[observed]action, len(observedStates))
	for _, o := range observedStates {
		m[o] = def
	}
	maps.Copy(m, except)
	return m
}

func (a *Agent) applyLoop(ctx context.Context) {
	for {
		start := a.clk.Now()
		acted := a.applyPass(ctx)
		if a.cfg.OnApplyPass != nil {
			a.cfg.OnApplyPass(a.clk.Now().Sub(start))
		}
		a.lastPass.Store(time.Now().UnixNano())
		wait := a.cfg.ApplyInterval
		if acted {
			// Look again soon: what was just started or stopped has
			// news to report.
			wait = min(wait, 100*time.Millisecond)
		}
		t := a.clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-a.wakeApply:
			t.Stop()
		case <-t.C():
		}
	}
}

// instanceOf is an instance and the driver that holds it.
type instanceOf struct {
	drivers.Instance
	driver drivers.Driver
}

// applyPass reconciles once: desired state against what the drivers hold.
// It reports whether it asked a driver to do anything.
func (a *Agent) applyPass(ctx context.Context) (acted bool) {
	a.mu.Lock()
	desired := a.state.Desired
	a.mu.Unlock()

	have := map[string]instanceOf{}
	listed := map[string]bool{} // drivers whose List answered
	for _, d := range a.cfg.Drivers.All() {
		var list []drivers.Instance
		err := a.calls.do(ctx, "list:"+d.Name(), a.cfg.DriverTimeout, func(ctx context.Context) (err error) {
			list, err = d.List(ctx)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("driver list failed", "driver", d.Name(), "err", err)
			}
			continue
		}
		listed[d.Name()] = true
		for _, in := range list {
			have[in.Workload] = instanceOf{Instance: in, driver: d}
		}
	}

	statuses := map[string]protocol.Status{}
	var gen int64
	var ws []protocol.DesiredWorkload
	if desired != nil {
		gen, ws = desired.Generation, desired.Workloads
	}
	inDesired := map[string]bool{}
	for _, dw := range ws {
		inDesired[dw.ID] = true
		s, did, ok := a.applyOne(ctx, dw, gen, have, listed, ws)
		acted = acted || did
		if ok {
			statuses[dw.ID] = s
		}
	}
	for id, in := range have {
		if inDesired[id] {
			continue
		}
		s := protocol.Status{Workload: id, Attempt: in.Attempt, Generation: gen, Code: protocol.CodeUnlisted}
		if transitions[wantUnlisted][observed(in.State)] == stop {
			a.log.Warn("stopping a workload desired state does not list; its data is kept", "workload", id, "driver", in.driver.Name())
			if err := a.calls.do(ctx, id, a.cfg.DriverTimeout, func(ctx context.Context) error { return in.driver.Stop(ctx, id) }); err != nil {
				s.Detail = err.Error()
			}
			acted = true
		}
		statuses[id] = s
	}
	if ctx.Err() != nil {
		return acted
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	// A workload whose driver did not answer keeps its last status.
	for id, s := range a.statuses {
		if _, ok := statuses[id]; !ok && inDesired[id] {
			statuses[id] = s
		}
	}
	if !maps.EqualFunc(statuses, a.statuses, sameStatus) || a.appliedGen != gen {
		a.statuses, a.appliedGen = statuses, gen
		a.cutShortLocked()
	}
	return acted
}

func sameStatus(x, y protocol.Status) bool {
	return x.Workload == y.Workload && x.Attempt == y.Attempt && x.Mode == y.Mode && x.Generation == y.Generation &&
		x.Code == y.Code && x.Detail == y.Detail && (x.ExitCode == nil) == (y.ExitCode == nil) &&
		(x.ExitCode == nil || *x.ExitCode == *y.ExitCode)
}

// applyOne reconciles one listed workload. ok is false when nothing can be
// said of it this pass (its driver did not answer).
func (a *Agent) applyOne(ctx context.Context, dw protocol.DesiredWorkload, gen int64, have map[string]instanceOf,
	listed map[string]bool, all []protocol.DesiredWorkload) (s protocol.Status, acted, ok bool) {
	s = protocol.Status{Workload: dw.ID, Attempt: dw.Attempt, Mode: dw.Mode, Generation: gen}
	in, has := have[dw.ID]
	d, known := a.cfg.Drivers.Get(dw.Driver)
	if has {
		// Whatever the hub now says, the instance lives with the driver
		// that holds it.
		d, known = in.driver, true
	}
	if !known {
		if dw.Mode == protocol.ModeRun {
			s.Code = protocol.CodeRefusedDriverMissing
			return s, false, true
		}
		s.Code = map[protocol.Mode]protocol.Code{protocol.ModePark: protocol.CodeStopped, protocol.ModeRemove: protocol.CodeRemoved}[dw.Mode]
		return s, false, true
	}
	if !listed[d.Name()] {
		return s, false, false
	}
	if a.calls.isBusy(dw.ID) {
		// A call that overran its limit is still out: until it returns
		// the workload stays as it was last reported, and nothing more is
		// asked of the driver for it.
		a.mu.Lock()
		last, ok := a.statuses[dw.ID]
		a.mu.Unlock()
		return last, false, ok
	}

	a.mu.Lock()
	h := a.state.Workloads[dw.ID]
	a.mu.Unlock()

	o := absent
	if has {
		o = observed(in.State)
	}
	w := want(dw.Mode)
	if dw.Mode == protocol.ModeRun {
		switch {
		case d.Isolation() < dw.Isolation:
			s.Code, s.Detail = protocol.CodeRefusedIsolation, fmt.Sprintf("driver %s gives %s isolation, %s needed", d.Name(), d.Isolation(), dw.Isolation)
			return s, false, true
		case d.Name() != dw.Driver || (h != nil && h.Driver != dw.Driver):
			s.Code, s.Detail = protocol.CodeRefusedDriverChange, "its data is held by driver "+d.Name()
			return s, false, true
		}
		w = wantRunStarted
		if h == nil || h.StartedAttempt < dw.Attempt {
			w = wantRunNew
		}
	}

	switch transitions[w][o] {
	case start:
		if other := a.gpuHolder(dw, have, all); other != "" {
			s.Code, s.Detail = protocol.CodeWaitingGPU, "its GPU is still held by "+other
			return s, false, true
		}
		// Recorded durably before the driver is asked, so a crash after
		// this point can never start the attempt a second time.
		if err := a.recordStart(dw); err != nil {
			a.log.Error("cannot record attempt; not starting it", "workload", dw.ID, "err", err)
			s.Code, s.Detail = protocol.CodeStarting, "agent cannot write its state: "+err.Error()
			return s, false, true
		}
		spec := drivers.Spec{Workload: dw.ID, Attempt: dw.Attempt, Kind: dw.Kind, Image: dw.Image, Resources: dw.Resources}
		err := a.calls.do(ctx, dw.ID, a.cfg.DriverTimeout, func(ctx context.Context) error { return d.Start(ctx, spec) })
		s.Code = protocol.CodeStarting
		if err != nil {
			s.Detail = err.Error()
			if !errors.Is(err, errTimeout) && !errors.Is(err, errBusy) && ctx.Err() == nil {
				s.Code = protocol.CodeFailedStart
				a.recordStartFailure(dw.ID, bounded(err.Error()))
			}
		}
		return s, true, true
	case stop:
		err := a.calls.do(ctx, dw.ID, a.cfg.DriverTimeout, func(ctx context.Context) error { return d.Stop(ctx, dw.ID) })
		s.Code = protocol.CodeStopping
		if err != nil {
			s.Detail = err.Error()
		}
		return s, true, true
	case remove:
		err := a.calls.do(ctx, dw.ID, a.cfg.DriverTimeout, func(ctx context.Context) error { return d.Remove(ctx, dw.ID) })
		s.Code = protocol.CodeRemoving
		if err != nil {
			s.Detail = err.Error()
		}
		return s, true, true
	}

	switch w {
	case wantRunStarted:
		observeRun(&s, in, has)
		if s.Code == protocol.CodeLost && h.StartFailure != "" {
			s.Code, s.Detail = protocol.CodeFailedStart, h.StartFailure
		}
	case wantPark:
		s.Code = protocol.CodeStopped
		if o == observed(drivers.StateStopping) {
			s.Code = protocol.CodeStopping
		}
	case wantRemove:
		s.Code = protocol.CodeRemoved
		a.forget(dw.ID)
	}
	return s, false, true
}

// observeRun says what became of an attempt that was started.
func observeRun(s *protocol.Status, in instanceOf, has bool) {
	if !has || in.Attempt < s.Attempt {
		s.Code, s.Detail = protocol.CodeLost, "its instance is gone from its driver"
		return
	}
	s.Detail = in.Detail
	switch in.State {
	case drivers.StateStarting:
		s.Code = protocol.CodeStarting
		if in.Progress != "" {
			s.Code, s.Detail = protocol.CodeProgressing, in.Progress
		}
	case drivers.StateRunning:
		s.Code = protocol.CodeRunning
	case drivers.StateStopping:
		s.Code = protocol.CodeStopping
	case drivers.StateStopped:
		s.Code = protocol.CodeStopped
	case drivers.StateExited:
		s.Code = protocol.CodeExited
		if in.OOMKilled {
			s.Code = protocol.CodeOOMKilled
		}
		code := in.ExitCode
		s.ExitCode = &code
	case drivers.StateFailed:
		s.Code = in.Code
		if s.Code == "" {
			s.Code = protocol.CodeFailedStart
		}
	}
}

// gpuHolder names another workload still active on a device dw needs.
func (a *Agent) gpuHolder(dw protocol.DesiredWorkload, have map[string]instanceOf, all []protocol.DesiredWorkload) string {
	if len(dw.Resources.Devices) == 0 {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	devicesOf := map[string][]string{}
	for id, h := range a.state.Workloads {
		devicesOf[id] = h.Devices
	}
	for _, o := range all {
		devicesOf[o.ID] = append(devicesOf[o.ID], o.Resources.Devices...)
	}
	for id, in := range have {
		if id == dw.ID || !in.Active() {
			continue
		}
		for _, dev := range dw.Resources.Devices {
			if slices.Contains(devicesOf[id], dev) {
				return id
			}
		}
	}
	return ""
}

func (a *Agent) recordStart(dw protocol.DesiredWorkload) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.state.Workloads[dw.ID]
	a.state.Workloads[dw.ID] = &held{Driver: dw.Driver, StartedAttempt: dw.Attempt, Devices: dw.Resources.Devices}
	if err := saveState(a.cfg.StateDir, a.state); err != nil {
		if prev == nil {
			delete(a.state.Workloads, dw.ID)
		} else {
			a.state.Workloads[dw.ID] = prev
		}
		return err
	}
	return nil
}

func (a *Agent) recordStartFailure(id, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h := a.state.Workloads[id]; h != nil {
		h.StartFailure = why
		if err := saveState(a.cfg.StateDir, a.state); err != nil {
			a.log.Warn("cannot save agent state", "err", err)
		}
	}
}

// bounded cuts text for a status's detail.
func bounded(s string) string {
	if len(s) > protocol.MaxDetail {
		return s[:protocol.MaxDetail]
	}
	return s
}

// forget drops what the agent kept of a removed workload.
func (a *Agent) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.state.Workloads[id]; !ok {
		return
	}
	delete(a.state.Workloads, id)
	if err := saveState(a.cfg.StateDir, a.state); err != nil {
		a.log.Warn("cannot save agent state", "err", err)
	}
}
