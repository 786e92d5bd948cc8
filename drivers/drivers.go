// Package drivers is the contract between the agent's apply loop and the
// runtimes that run workloads. One sub-package per driver implements it:
// sim (development only; it runs nothing), docker (docker and
// docker-sandbox), macosnative (darwin). A driver
// knows nothing of the hub: it is told what to run and reports what it has.
package drivers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"einsora.dev/edge/protocol"
)

// State is what a driver sees of one instance.
type State string

const (
	// StateStarting: being created or started. Long work (an image pull,
	// a disk being made) shows as StateStarting with Progress set.
	StateStarting State = "starting"
	StateRunning  State = "running"
	StateStopping State = "stopping"
	// StateStopped: stopped on request; instance and data kept.
	StateStopped State = "stopped"
	// StateExited: it ended by itself; ExitCode and OOMKilled say how.
	StateExited State = "exited"
	// StateFailed: it could not be started; Code says why.
	StateFailed State = "failed"
)

// Spec is what the agent asks a driver to run.
type Spec struct {
	Workload  string
	Attempt   int64
	Kind      protocol.Kind
	Image     string
	Resources protocol.Resources
	// WorkloadSpec is the command, environment, ports, working directory,
	// volumes and restart policy from desired state. Its SecretEnv must
	// never reach a log, a label or an Instance's Detail. Drivers apply it
	// when they create an instance; docs/drivers.md says what each does
	// with each field. The restart policy is the agent's business, not the
	// driver's.
	protocol.WorkloadSpec
}

// Check refuses a spec a driver must not run: one without a workload ID or
// whose WorkloadSpec fails Validate. Every driver's Start calls it first.
func (s Spec) Check() error {
	if s.Workload == "" {
		return errors.New("empty workload id")
	}
	if err := s.WorkloadSpec.Validate(); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	return nil
}

// Instance is a driver's view of one workload it holds.
type Instance struct {
	Workload string
	// Attempt is the attempt the instance was last started for.
	Attempt   int64
	State     State
	ExitCode  int
	OOMKilled bool
	// Code is set with StateFailed: protocol.CodeFailedStart or
	// protocol.CodeImageUnavailable.
	Code protocol.Code
	// Progress is a short summary of long work, e.g. "pulled 3/7 layers".
	Progress string
	// Detail is free text for operators.
	Detail string
}

// Active reports whether the instance holds its devices: anything but a
// stopped, exited or failed one.
func (i Instance) Active() bool {
	switch i.State {
	case StateStarting, StateRunning, StateStopping:
		return true
	}
	return false
}

// Driver runs workloads of one runtime. Every method takes a context whose
// deadline the caller sets; implementations honour it and return promptly.
// Methods are safe for concurrent use, but the apply loop never calls two at
// once for the same workload.
type Driver interface {
	// Name is the driver's name in the hub's driver table, e.g. "docker".
	Name() string
	// Isolation is how strongly the driver separates a workload from its
	// host. The agent refuses a workload that needs more.
	Isolation() protocol.Isolation
	// Start makes the workload run for spec.Attempt: it creates the
	// instance and its data if absent and starts it if stopped or exited,
	// keeping the data. It returns once the work is under way; long work
	// goes on in the background and shows in List. Start on an instance
	// that is already starting or running does nothing but record the
	// attempt.
	Start(ctx context.Context, spec Spec) error
	// Stop stops the workload, keeping instance and data. A missing
	// instance is not an error.
	Stop(ctx context.Context, workload string) error
	// Remove deletes the instance and all its data. A missing instance is
	// not an error. The agent calls it only for workloads that desired
	// state lists for removal.
	Remove(ctx context.Context, workload string) error
	// List returns every instance the driver owns on this machine, and
	// only those: what the driver did not make is never listed or touched.
	List(ctx context.Context) ([]Instance, error)
}

// LogLine is one line of a workload's output.
type LogLine struct {
	Time time.Time
	// Stream is "stdout", "stderr", or "system" for the driver's own word.
	Stream string
	Line   string
}

// Log streams.
const (
	LogStdout = "stdout"
	LogStderr = "stderr"
	LogSystem = "system"
)

// MaxLogLine bounds a line a driver emits; longer output is cut into
// lines of this length.
const MaxLogLine = 16 << 10

// LineSplitter turns a byte stream into LogLines of one stream: each line
// stamped by now() as it arrives, cut at MaxLogLine. Close emits a last
// line without a newline.
type LineSplitter struct {
	Stream string
	Now    func() time.Time
	Emit   func(LogLine)
	buf    []byte
}

func (l *LineSplitter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		room := MaxLogLine - len(l.buf)
		i := bytes.IndexByte(p, '\n')
		switch {
		case i >= 0 && i <= room:
			l.buf = append(l.buf, p[:i]...)
			p = p[i+1:]
		case len(p) < room:
			l.buf = append(l.buf, p...)
			return n, nil
		default:
			l.buf = append(l.buf, p[:room]...)
			p = p[room:]
		}
		l.flush()
	}
	return n, nil
}

func (l *LineSplitter) flush() {
	line := string(l.buf)
	l.buf = l.buf[:0]
	l.Emit(LogLine{Time: l.Now(), Stream: l.Stream, Line: line})
}

// Close emits what is left of a line.
func (l *LineSplitter) Close() error {
	if len(l.buf) > 0 {
		l.flush()
	}
	return nil
}

// Prober is implemented by drivers that can be unavailable (an engine that
// is down). The agent offers only drivers whose Probe succeeds, and probes
// again on every inventory refresh.
type Prober interface {
	Probe(ctx context.Context) error
}

// ErrUnavailable is wrapped by driver errors that mean the runtime itself
// does not answer, rather than that this one workload failed.
var ErrUnavailable = errors.New("driver unavailable")

// Host knows which drivers this machine has, and which of them are offered
// now: a driver's runtime can stop answering (the engine stopped) and come
// back (Docker Desktop opened at login), so the offered set changes while
// the drivers stay. It is safe for concurrent use.
type Host struct {
	byName map[string]Driver
	// mu guards offered.
	mu      sync.RWMutex
	offered map[string]bool
}

// NewHost returns a host with ds, every one offered until Offer says
// otherwise. Names must be distinct.
func NewHost(ds ...Driver) *Host {
	h := &Host{byName: make(map[string]Driver, len(ds)), offered: make(map[string]bool, len(ds))}
	for _, d := range ds {
		h.byName[d.Name()] = d
		h.offered[d.Name()] = true
	}
	return h
}

// Get returns the driver called name, offered or not.
func (h *Host) Get(name string) (Driver, bool) {
	d, ok := h.byName[name]
	return d, ok
}

// Names returns the drivers' names, offered or not, sorted.
func (h *Host) Names() []string {
	names := make([]string, 0, len(h.byName))
	for n := range h.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// All returns the drivers, offered or not, sorted by name.
func (h *Host) All() []Driver {
	ds := make([]Driver, 0, len(h.byName))
	for _, n := range h.Names() {
		ds = append(ds, h.byName[n])
	}
	return ds
}

// Offer makes names, those of them the host has, the offered set. It
// returns the names that were added and dropped, sorted.
func (h *Host) Offer(names ...string) (added, dropped []string) {
	next := make(map[string]bool, len(names))
	for _, n := range names {
		if _, ok := h.byName[n]; ok {
			next[n] = true
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for n := range next {
		if !h.offered[n] {
			added = append(added, n)
		}
	}
	for n := range h.offered {
		if !next[n] {
			dropped = append(dropped, n)
		}
	}
	h.offered = next
	sort.Strings(added)
	sort.Strings(dropped)
	return added, dropped
}

// IsOffered reports whether the driver called name is offered now.
func (h *Host) IsOffered(name string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.offered[name]
}

// Offered returns the drivers offered now, sorted by name.
func (h *Host) Offered() []Driver {
	h.mu.RLock()
	defer h.mu.RUnlock()
	ds := make([]Driver, 0, len(h.offered))
	for _, n := range h.Names() {
		if h.offered[n] {
			ds = append(ds, h.byName[n])
		}
	}
	return ds
}
