// Package sim is a driver that runs nothing. It keeps its instances as files
// in the agent's state directory, so they survive agent restarts the way
// containers survive them, and its image string configures start delays,
// progress, exits and injected failures for development and tests.
//
// Image syntax: "sim" or "sim:" alone, or "sim:" followed by comma-separated
// options, e.g. "sim:start-delay=2s,progress=3,exit-after=10s,exit-code=3".
//
//	start-delay=D   the instance is starting for D before it runs
//	progress=N      while starting, Progress reads "step i/N"
//	exit-after=D    a running instance exits by itself after D
//	exit-code=N     the exit code when it exits (default 0)
//	fail=start      Start fails: the instance is failed_start
//	fail=image      the image cannot be had: image_unavailable
//	hang=OP         OP (start, stop, remove, list) blocks, ignoring its
//	                context, until the driver is closed
//	listen          while running, the spec's published host ports are
//	                open on 127.0.0.1: a TCP connection reads one line,
//	                "sim WORKLOAD\n", and a UDP datagram is answered with
//	                it; the ports close when it stops, exits or is removed
//
// The workload spec is recorded as given (Spec reads it back) and checked
// like every driver does; nothing else of it has an effect.
package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/internal/instancefile"
	"einsora.dev/edge/protocol"
)

// Name is the driver's name in the hub's driver table.
const Name = "sim"

// Driver is the sim driver.
type Driver struct {
	dir    string
	clk    clock.Clock
	closed chan struct{}
	once   sync.Once

	// mu guards the instance files and listeners.
	mu sync.Mutex
	// listeners are the open ports of running "listen" instances.
	listeners map[string][]io.Closer
}

var (
	_ drivers.Driver = (*Driver)(nil)
	_ drivers.Prober = (*Driver)(nil)
)

// New returns a sim driver keeping its instances under dir.
func New(dir string, clk clock.Clock) (*Driver, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return &Driver{dir: dir, clk: clk, closed: make(chan struct{}), listeners: map[string][]io.Closer{}}, nil
}

// Close releases calls that hang on purpose and closes every open port.
func (d *Driver) Close() error {
	d.once.Do(func() { close(d.closed) })
	d.mu.Lock()
	defer d.mu.Unlock()
	for w := range d.listeners {
		d.closePortsLocked(w)
	}
	return nil
}

func (d *Driver) Name() string                  { return Name }
func (d *Driver) Isolation() protocol.Isolation { return protocol.IsolationVM }
func (d *Driver) Probe(context.Context) error   { return nil }

// record is one instance as kept on disk.
type record struct {
	Workload  string        `json:"workload"`
	Attempt   int64         `json:"attempt"`
	Image     string        `json:"image"`
	Running   bool          `json:"running"` // started and not stopped
	StartedAt time.Time     `json:"started_at"`
	StoppedAt time.Time     `json:"stopped_at,omitzero"`
	Starts    int           `json:"starts"` // how many times it was actually started
	Opts      options       `json:"opts"`
	Failed    protocol.Code `json:"failed,omitempty"`
	// Spec is the workload spec of the last Start. The file is the
	// agent's (mode 0600), like the desired state that carried it.
	Spec protocol.WorkloadSpec `json:"spec,omitzero"`
}

type options struct {
	StartDelay time.Duration `json:"start_delay,omitempty"`
	Progress   int           `json:"progress,omitempty"`
	ExitAfter  time.Duration `json:"exit_after,omitempty"`
	ExitCode   int           `json:"exit_code,omitempty"`
	Fail       string        `json:"fail,omitempty"`
	Hang       string        `json:"hang,omitempty"`
	Listen     bool          `json:"listen,omitempty"`
}

// ParseImage reads a sim image string.
func ParseImage(image string) (options, error) {
	var o options
	rest, ok := strings.CutPrefix(image, "sim:")
	if !ok {
		// "sim" and "" carry no options: CutPrefix left the whole string
		// in rest, which must not be read as one.
		if image != "" && image != "sim" {
			return o, fmt.Errorf("sim image %q: want sim, or sim:option,... (see docs/drivers.md)", image)
		}
		rest = ""
	}
	for opt := range strings.SplitSeq(rest, ",") {
		if opt == "" {
			continue
		}
		k, v, _ := strings.Cut(opt, "=")
		var err error
		switch k {
		case "listen":
			o.Listen = true
		case "start-delay":
			o.StartDelay, err = time.ParseDuration(v)
		case "exit-after":
			o.ExitAfter, err = time.ParseDuration(v)
		case "progress":
			o.Progress, err = strconv.Atoi(v)
		case "exit-code":
			o.ExitCode, err = strconv.Atoi(v)
		case "fail":
			if v != "start" && v != "image" {
				err = errors.New("want start or image")
			}
			o.Fail = v
		case "hang":
			if v != "start" && v != "stop" && v != "remove" && v != "list" {
				err = errors.New("want start, stop, remove or list")
			}
			o.Hang = v
		default:
			err = errors.New("unknown option")
		}
		if err != nil {
			return o, fmt.Errorf("sim image %q: option %q: %w", image, opt, err)
		}
	}
	return o, nil
}

// DataDir is where the workload's data lives; tests write files there.
func (d *Driver) DataDir(workload string) string {
	return filepath.Join(d.dir, instancefile.Name(workload), "data")
}

func (d *Driver) Start(ctx context.Context, spec drivers.Spec) error {
	if err := spec.Check(); err != nil {
		return fmt.Errorf("sim: start %s: %w", spec.Workload, err)
	}
	opts, err := ParseImage(spec.Image)
	if err != nil {
		return fmt.Errorf("sim: start: %w", err)
	}
	if opts.Hang == "start" {
		<-d.closed
		return errors.New("sim: start: driver closed")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err := d.loadLocked(spec.Workload)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sim: start %s: %w", spec.Workload, err)
	}
	if r == nil {
		r = &record{Workload: spec.Workload}
		if err := os.MkdirAll(d.DataDir(spec.Workload), 0o700); err != nil {
			return fmt.Errorf("sim: start %s: %w", spec.Workload, err)
		}
	}
	now := d.clk.Now()
	r.Attempt, r.Image, r.Opts, r.Spec = spec.Attempt, spec.Image, opts, spec.WorkloadSpec
	switch state, _ := r.state(now); state {
	case drivers.StateStarting, drivers.StateRunning:
		return d.saveLocked(r)
	}
	r.Failed = ""
	switch opts.Fail {
	case "start":
		r.Failed = protocol.CodeFailedStart
	case "image":
		r.Failed = protocol.CodeImageUnavailable
	}
	r.Running = r.Failed == ""
	r.StartedAt, r.StoppedAt = now, time.Time{}
	if r.Running {
		r.Starts++
	}
	if err := d.portsLocked(r, now); err != nil {
		// As a container whose port is taken: it does not start.
		r.Running, r.Failed = false, protocol.CodeFailedStart
		if serr := d.saveLocked(r); serr != nil {
			return serr
		}
		return fmt.Errorf("sim: start %s: %w", spec.Workload, err)
	}
	return d.saveLocked(r)
}

func (d *Driver) Stop(ctx context.Context, workload string) error {
	d.mu.Lock()
	r, err := d.loadLocked(workload)
	d.mu.Unlock()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sim: stop %s: %w", workload, err)
	}
	if r.Opts.Hang == "stop" {
		<-d.closed
		return errors.New("sim: stop: driver closed")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if r.Running {
		r.Running = false
		r.StoppedAt = d.clk.Now()
	}
	d.closePortsLocked(workload)
	return d.saveLocked(r)
}

func (d *Driver) Remove(ctx context.Context, workload string) error {
	d.mu.Lock()
	r, err := d.loadLocked(workload)
	d.mu.Unlock()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sim: remove %s: %w", workload, err)
	}
	if r.Opts.Hang == "remove" {
		<-d.closed
		return errors.New("sim: remove: driver closed")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closePortsLocked(workload)
	if err := os.RemoveAll(filepath.Join(d.dir, instancefile.Name(workload))); err != nil {
		return fmt.Errorf("sim: remove %s: %w", workload, err)
	}
	if err := os.Remove(instancefile.RecordPath(d.dir, workload)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sim: remove %s: %w", workload, err)
	}
	return nil
}

func (d *Driver) List(ctx context.Context) ([]drivers.Instance, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("sim: list: %w", err)
	}
	now := d.clk.Now()
	var out []drivers.Instance
	hang := false
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		r, err := instancefile.Load[record](filepath.Join(d.dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("sim: list: %s: %w", name, err)
		}
		hang = hang || r.Opts.Hang == "list"
		// A port that cannot be opened again (after an agent restart)
		// stays closed and is tried again at the next List; one
		// workload's port must not hide the others.
		_ = d.portsLocked(r, now)
		out = append(out, r.instance(now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Workload < out[j].Workload })
	if hang {
		d.mu.Unlock()
		<-d.closed
		d.mu.Lock()
		return nil, errors.New("sim: list: driver closed")
	}
	return out, nil
}

// Spec returns the workload spec the workload was last started with.
func (d *Driver) Spec(workload string) (protocol.WorkloadSpec, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err := d.loadLocked(workload)
	if err != nil {
		return protocol.WorkloadSpec{}, fmt.Errorf("sim: spec %s: %w", workload, err)
	}
	return r.Spec, nil
}

// portsLocked opens a running "listen" instance's published ports, and
// closes them once it is not running (it exited, or a later agent found it
// so). A port that cannot be opened is an error for the caller to report.
func (d *Driver) portsLocked(r *record, now time.Time) error {
	state, _ := r.state(now)
	if !r.Opts.Listen || state != drivers.StateRunning {
		d.closePortsLocked(r.Workload)
		return nil
	}
	if _, open := d.listeners[r.Workload]; open {
		return nil
	}
	line := []byte("sim " + r.Workload + "\n")
	var ls []io.Closer
	for _, p := range r.Spec.Ports {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Host))
		var c io.Closer
		var err error
		if p.Protocol() == protocol.ProtoUDP {
			c, err = listenUDP(addr, line)
		} else {
			c, err = listenTCP(addr, line)
		}
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return fmt.Errorf("publish %s: %w", p, err)
		}
		ls = append(ls, c)
	}
	d.listeners[r.Workload] = ls
	return nil
}

func (d *Driver) closePortsLocked(workload string) {
	for _, l := range d.listeners[workload] {
		l.Close()
	}
	delete(d.listeners, workload)
}

func listenTCP(addr string, line []byte) (io.Closer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed
			}
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.Write(line)
			c.Close()
		}
	}()
	return l, nil
}

func listenUDP(addr string, line []byte) (io.Closer, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			_, _ = pc.WriteTo(line, from)
		}
	}()
	return pc, nil
}

// FollowLogs emits a synthetic System line for each state the workload's
// instance passes through after since, read every LogPoll on the driver's
// clock, and returns once it is no longer starting or running (after its
// last line), when it is missing, or when ctx ends. The sim runs nothing,
// so this is all the output it has.
func (d *Driver) FollowLogs(ctx context.Context, workload string, since time.Time, emit func(drivers.LogLine)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-d.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	last := ""
	for {
		d.mu.Lock()
		r, err := d.loadLocked(workload)
		d.mu.Unlock()
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sim: logs %s: %w", workload, err)
		}
		now := d.clk.Now()
		in := r.instance(now)
		line := fmt.Sprintf("sim: %s attempt %d is %s", workload, in.Attempt, in.State)
		switch {
		case in.State == drivers.StateExited:
			line += fmt.Sprintf(" with code %d", in.ExitCode)
		case in.Progress != "":
			line += " (" + in.Progress + ")"
		}
		if line != last && now.After(since) {
			emit(drivers.LogLine{Time: now, Stream: drivers.LogSystem, Line: line})
		}
		last = line
		if in.State != drivers.StateStarting && in.State != drivers.StateRunning {
			return nil
		}
		if !clock.Sleep(d.clk, LogPoll, ctx.Done()) {
			return nil
		}
	}
}

// LogPoll is how often FollowLogs looks at an instance's state.
const LogPoll = 50 * time.Millisecond

// Starts reports how many times the workload's instance was actually
// started, so tests can check that an attempt started at most once.
func (d *Driver) Starts(workload string) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err := d.loadLocked(workload)
	if err != nil {
		return 0, err
	}
	return r.Starts, nil
}

func (r *record) state(now time.Time) (drivers.State, string) {
	switch {
	case r.Failed != "":
		return drivers.StateFailed, ""
	case !r.Running:
		return drivers.StateStopped, ""
	}
	up := now.Sub(r.StartedAt)
	if up < r.Opts.StartDelay {
		progress := ""
		if r.Opts.Progress > 0 {
			step := int(int64(up)*int64(r.Opts.Progress)/int64(r.Opts.StartDelay)) + 1
			progress = fmt.Sprintf("step %d/%d", step, r.Opts.Progress)
		}
		return drivers.StateStarting, progress
	}
	if r.Opts.ExitAfter > 0 && up >= r.Opts.StartDelay+r.Opts.ExitAfter {
		return drivers.StateExited, ""
	}
	return drivers.StateRunning, ""
}

func (r *record) instance(now time.Time) drivers.Instance {
	state, progress := r.state(now)
	in := drivers.Instance{Workload: r.Workload, Attempt: r.Attempt, State: state, Progress: progress}
	switch state {
	case drivers.StateExited:
		in.ExitCode = r.Opts.ExitCode
	case drivers.StateFailed:
		in.Code = r.Failed
		in.Detail = "sim: injected failure"
	}
	return in
}

func (d *Driver) loadLocked(workload string) (*record, error) {
	return instancefile.Load[record](instancefile.RecordPath(d.dir, workload))
}

func (d *Driver) saveLocked(r *record) error {
	if err := instancefile.Save(instancefile.RecordPath(d.dir, r.Workload), r); err != nil {
		return fmt.Errorf("sim: save %s: %w", r.Workload, err)
	}
	return nil
}
