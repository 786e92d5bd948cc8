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

const (
	absent   observed = "absent"
	starting          = observed(drivers.StateStarting)
	running           = observed(drivers.StateRunning)
	stopping          = observed(drivers.StateStopping)
	stopped           = observed(drivers.StateStopped)
	exited            = observed(drivers.StateExited)
	failed            = observed(drivers.StateFailed)
)

type action int

const (
	report action = iota + 1 // nothing to do but say what is seen
	start
	stop
	remove
)

// cell is one entry of the transition table.
type cell struct {
	want     want
	observed observed
}

// transitions is the apply loop's table: what is wanted × what is observed
// → what to do. Every cell is written out, so a reader sees each decision
// and a missing one fails TestTransitionsComplete, which enumerates the
// modes and driver states on its own.
var transitions = map[cell]action{
	// A new attempt starts whatever the driver shows: Start restarts a
	// stopped instance with its data, and is a no-op on a live one.
	{wantRunNew, absent}:   start,
	{wantRunNew, starting}: start,
	{wantRunNew, running}:  start,
	{wantRunNew, stopping}: start,
	{wantRunNew, stopped}:  start,
	{wantRunNew, exited}:   start,
	{wantRunNew, failed}:   start,

	// A started attempt is never started again: its end is reported, and
	// the hub decides whether there is a new attempt.
	{wantRunStarted, absent}:   report,
	{wantRunStarted, starting}: report,
	{wantRunStarted, running}:  report,
	{wantRunStarted, stopping}: report,
	{wantRunStarted, stopped}:  report,
	{wantRunStarted, exited}:   report,
	{wantRunStarted, failed}:   report,

	// Park stops what is live and keeps everything.
	{wantPark, absent}:   report,
	{wantPark, starting}: stop,
	{wantPark, running}:  stop,
	{wantPark, stopping}: report,
	{wantPark, stopped}:  report,
	{wantPark, exited}:   report,
	{wantPark, failed}:   report,

	// Removal is the only way data is deleted.
	{wantRemove, absent}:   report,
	{wantRemove, starting}: remove,
	{wantRemove, running}:  remove,
	{wantRemove, stopping}: remove,
	{wantRemove, stopped}:  remove,
	{wantRemove, exited}:   remove,
	{wantRemove, failed}:   remove,

	// What is not listed is stopped and kept: a list leaves a workload out
	// only by mistake, and deleting data is never the safe guess (rule 3).
	{wantUnlisted, absent}:   report,
	{wantUnlisted, starting}: stop,
	{wantUnlisted, running}:  stop,
	{wantUnlisted, stopping}: report,
	{wantUnlisted, stopped}:  report,
	{wantUnlisted, exited}:   report,
	{wantUnlisted, failed}:   report,
}

// decide reads the table. A cell that is missing does nothing: it is a bug
// the completeness test catches, and doing nothing is the safe guess.
func (a *Agent) decide(w want, o observed) action {
	act, ok := transitions[cell{w, o}]
	if !ok {
		a.log.Error("no transition for this pair; doing nothing", "want", w, "observed", o)
		return report
	}
	return act
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
		if due := a.restarts.next(); !due.IsZero() {
			wait = min(wait, max(due.Sub(a.clk.Now()), time.Millisecond))
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
	for _, d := range a.cfg.Drivers.Offered() {
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

	a.followLogs(ctx, have)
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
		s, did := a.applyUnlisted(ctx, id, in, gen)
		acted = acted || did
		statuses[id] = s
	}
	if ctx.Err() != nil {
		return acted
	}

	a.mu.Lock()
	// A workload whose driver did not answer keeps its last status.
	for id, s := range a.statuses {
		if _, ok := statuses[id]; !ok && inDesired[id] {
			statuses[id] = s
		}
	}
	changed := !maps.EqualFunc(statuses, a.statuses, sameStatus)
	if changed || a.appliedGen != gen {
		a.statuses, a.appliedGen = statuses, gen
		a.cutShortLocked()
	}
	var file []byte
	if changed || a.errorsChanged {
		file = a.statusFileLocked()
		a.errorsChanged = false
	}
	a.mu.Unlock()
	if file != nil {
		a.writeStatusFile(file)
	}
	return acted
}

// applyUnlisted reconciles a workload the agent holds but desired state does
// not list, through the same table as the listed ones.
func (a *Agent) applyUnlisted(ctx context.Context, id string, in instanceOf, gen int64) (s protocol.Status, acted bool) {
	s = protocol.Status{Workload: id, Attempt: in.Attempt, Generation: gen, Code: protocol.CodeUnlisted}
	switch act := a.decide(wantUnlisted, observed(in.State)); act {
	case stop:
		a.log.Warn("stopping a workload desired state does not list; its data is kept", "workload", id, "driver", in.driver.Name())
		if err := a.drive(ctx, "stop", in.driver, id, func(ctx context.Context) error { return in.driver.Stop(ctx, id) }); err != nil {
			s.Detail = bounded(err.Error())
		}
		return s, true
	case report:
	default:
		// Rule 3: what is not listed is never started or deleted,
		// whatever the table says.
		a.log.Error("the transition table asks to start or remove an unlisted workload; doing nothing", "workload", id, "action", act)
	}
	return s, false
}

func sameStatus(x, y protocol.Status) bool {
	return x.Workload == y.Workload && x.Attempt == y.Attempt && x.Mode == y.Mode && x.Generation == y.Generation &&
		x.Code == y.Code && x.Detail == y.Detail && x.Restarts == y.Restarts && (x.ExitCode == nil) == (y.ExitCode == nil) &&
		(x.ExitCode == nil || *x.ExitCode == *y.ExitCode)
}

// applyOne reconciles one listed workload. ok is false when nothing can be
// said of it this pass (its driver did not answer).
func (a *Agent) applyOne(ctx context.Context, dw protocol.DesiredWorkload, gen int64, have map[string]instanceOf,
	listed map[string]bool, all []protocol.DesiredWorkload) (s protocol.Status, acted, ok bool) {
	s = protocol.Status{Workload: dw.ID, Attempt: dw.Attempt, Mode: dw.Mode, Generation: gen}
	a.mu.Lock()
	h := a.state.Workloads[dw.ID]
	a.mu.Unlock()
	in, has := have[dw.ID]
	if !has && h != nil && !a.cfg.Drivers.IsOffered(h.Driver) {
		// Its runtime stopped answering, or this agent no longer has
		// the driver: the instance and its data may well still be there,
		// so it is lost, never stopped or removed, until the driver
		// answers again.
		s.Code, s.Detail = protocol.CodeLost, bounded("its driver "+h.Driver+" does not answer; "+NoRuntimeNote([]string{h.Driver}))
		return s, false, true
	}
	d, known := a.cfg.Drivers.Get(dw.Driver)
	known = known && a.cfg.Drivers.IsOffered(dw.Driver)
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
		// Nothing of it is held here: it is as parked or removed as it
		// can be.
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

	switch a.decide(w, o) {
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
		spec := drivers.Spec{Workload: dw.ID, Attempt: dw.Attempt, Kind: dw.Kind, Image: dw.Image, Resources: dw.Resources, WorkloadSpec: dw.WorkloadSpec}
		err := a.drive(ctx, "start", d, dw.ID, func(ctx context.Context) error { return d.Start(ctx, spec) })
		s.Code = protocol.CodeStarting
		if err != nil {
			s.Detail = bounded(err.Error())
			if !errors.Is(err, errTimeout) && !errors.Is(err, errBusy) && ctx.Err() == nil {
				s.Code = protocol.CodeFailedStart
				a.recordStartFailure(dw.ID, bounded(err.Error()))
			}
		}
		return s, true, true
	case stop:
		err := a.drive(ctx, "stop", d, dw.ID, func(ctx context.Context) error { return d.Stop(ctx, dw.ID) })
		s.Code = protocol.CodeStopping
		if err != nil {
			s.Detail = bounded(err.Error())
		}
		return s, true, true
	case remove:
		err := a.drive(ctx, "remove", d, dw.ID, func(ctx context.Context) error { return d.Remove(ctx, dw.ID) })
		s.Code = protocol.CodeRemoving
		if err != nil {
			s.Detail = bounded(err.Error())
		}
		return s, true, true
	}

	switch w {
	case wantRunStarted:
		observeRun(&s, in, has)
		if s.Code == protocol.CodeLost && h.StartFailure != "" {
			s.Code, s.Detail = protocol.CodeFailedStart, h.StartFailure
		}
		if a.restartLocal(ctx, dw, d, in, has, &s) {
			return s, true, true
		}
	case wantPark:
		s.Code = protocol.CodeStopped
		if o == stopping {
			s.Code = protocol.CodeStopping
		}
	case wantRemove:
		s.Code = protocol.CodeRemoved
		a.forget(dw.ID)
	}
	return s, false, true
}

// drive makes one driver call for a workload, bounded in time. A failure is
// logged on the machine, where its owner can read it, and kept as the
// workload's last error for `einsora-agent status`: the hub shows only its
// fixed reasons.
func (a *Agent) drive(ctx context.Context, op string, d drivers.Driver, workload string, fn func(context.Context) error) error {
	err := a.calls.do(ctx, workload, a.cfg.DriverTimeout, fn)
	if err == nil || ctx.Err() != nil {
		return err
	}
	a.log.Warn("driver call failed", "op", op, "workload", workload, "driver", d.Name(), "err", err)
	a.noteError(workload, DriverError{Op: op, Driver: d.Name(), Error: bounded(err.Error()), At: a.clk.Now().UTC()})
	return err
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
	a.dropLogs(id)
}
