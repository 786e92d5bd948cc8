package driverstest_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/driverstest"
	"einsora.dev/edge/protocol"
)

// machine is what survives a restart of memDriver: its instances, and
// instances of others that it must leave alone.
type machine struct {
	mu      sync.Mutex
	next    int
	inst    map[string]*memInstance
	foreign map[string]string
}

type memInstance struct {
	id      string
	attempt int64
	state   drivers.State
	exit    int
	code    protocol.Code
	data    map[string]string
}

// memDriver is the smallest correct driver: it keeps the suite honest, as
// the suite must pass against it.
type memDriver struct{ m *machine }

var _ drivers.Driver = memDriver{}

func (memDriver) Name() string                  { return "mem" }
func (memDriver) Isolation() protocol.Isolation { return protocol.IsolationProcess }

func (d memDriver) Start(_ context.Context, spec drivers.Spec) error {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	in := d.m.inst[spec.Workload]
	if in == nil {
		d.m.next++
		in = &memInstance{id: fmt.Sprint(d.m.next), data: make(map[string]string)}
		d.m.inst[spec.Workload] = in
	}
	in.attempt = spec.Attempt
	switch {
	case in.state == drivers.StateRunning:
	case spec.Image == "missing":
		in.state, in.code = drivers.StateFailed, protocol.CodeImageUnavailable
	case spec.Image == "exit-3":
		in.state, in.exit = drivers.StateExited, 3
	default:
		in.state, in.code = drivers.StateRunning, ""
	}
	return nil
}

func (d memDriver) Stop(_ context.Context, w string) error {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if in := d.m.inst[w]; in != nil && in.state != drivers.StateFailed {
		in.state = drivers.StateStopped
	}
	return nil
}

func (d memDriver) Remove(_ context.Context, w string) error {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	delete(d.m.inst, w)
	return nil
}

func (d memDriver) List(context.Context) ([]drivers.Instance, error) {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	var out []drivers.Instance
	for w, in := range d.m.inst {
		out = append(out, drivers.Instance{Workload: w, Attempt: in.attempt, State: in.state, ExitCode: in.exit, Code: in.code})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Workload < out[j].Workload })
	return out, nil
}

func TestRunAgainstMemDriver(t *testing.T) {
	m := &machine{inst: make(map[string]*memInstance), foreign: make(map[string]string)}
	instance := func(w string) *memInstance {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.inst[w]
	}
	driverstest.Run(t, func(*testing.T) drivers.Driver { return memDriver{m} }, driverstest.Options{
		Image:        "run",
		ExitImage:    "exit-3",
		ExitCode:     3,
		MissingImage: "missing",
		WriteData: func(t *testing.T, w, name, content string) {
			in := instance(w)
			if in == nil {
				t.Fatalf("write data: no instance of %s", w)
			}
			m.mu.Lock()
			in.data[name] = content
			m.mu.Unlock()
		},
		ReadData: func(t *testing.T, w, name string) (string, bool) {
			in := instance(w)
			if in == nil {
				return "", false
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			v, ok := in.data[name]
			return v, ok
		},
		InstanceID: func(t *testing.T, w string) string {
			if in := instance(w); in != nil {
				return in.id
			}
			return ""
		},
		Foreign: func(t *testing.T, w string) func() bool {
			m.mu.Lock()
			m.foreign[w] = "running"
			m.mu.Unlock()
			return func() bool {
				m.mu.Lock()
				defer m.mu.Unlock()
				return m.foreign[w] == "running"
			}
		},
	})
}
