// Package macosnative is the "macos-native" driver: it runs a workload as a
// plain process of the host. On a Mac it is the one driver that can use the
// Apple GPU; the hub's driver table allows it only for the machine owner's
// own workloads, since a process is weakly isolated from its host.
//
// Image syntax: "exec:" followed by an absolute program path and its
// arguments, split on spaces (no shell, no quoting), e.g.
// "exec:/opt/einsora/bin/infer --port 8080".
//
// Each workload W has, under the driver's directory, a record W.json
// (written atomically) and a directory W/ holding W/data/ (the workload's
// data, its working directory and $EINSORA_DATA), W/log (stdout, appended)
// and W/log.stderr (stderr, appended); FollowLogs tails both. The process runs in its own session, so it outlives an
// agent restart; the record's pid and process start time let a new agent
// find it again without mistaking a reused pid for it.
//
// The workload spec: Command replaces the image's arguments; Env and
// SecretEnv are added to a small inherited environment; Workdir and each
// volume's Path are read inside the data directory (volumes are plain
// directories there); a port must have equal host and container numbers,
// since the process binds it itself. Memory is bounded on Linux with
// RLIMIT_DATA set right after the process starts (see limits_linux.go); on
// darwin nothing is enforced, see limits_other.go.
package macosnative

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/internal/instancefile"
	"einsora.dev/edge/protocol"
)

// Name is the driver's name in the hub's driver table.
const Name = "macos-native"

// DefaultStopGrace is how long Stop waits after SIGTERM before SIGKILL.
const DefaultStopGrace = 10 * time.Second

// Options configure a Driver.
type Options struct {
	// Dir is the driver's state, a directory under the agent's state
	// directory. Required.
	Dir    string
	Logger *slog.Logger
	// StopGrace is how long Stop waits after SIGTERM before it sends
	// SIGKILL; zero means DefaultStopGrace.
	StopGrace time.Duration
	// Allowed lists absolute directories whose executables may run; a
	// program outside all of them is refused (image_unavailable). Empty
	// allows any absolute path.
	Allowed []string
}

// Driver is the macos-native driver.
type Driver struct {
	dir     string
	log     *slog.Logger
	grace   time.Duration
	allowed []string

	// mu guards the records, children and closed.
	mu       sync.Mutex
	children map[string]*child // by workload: processes this driver started
	closed   bool
}

// child is a process this driver started and reaps.
type child struct {
	pid  int
	done chan struct{} // closed once reaped and its exit recorded
}

var (
	_ drivers.Driver = (*Driver)(nil)
	_ drivers.Prober = (*Driver)(nil)
)

// New returns a driver keeping its state under o.Dir.
func New(o Options) (*Driver, error) {
	if o.Dir == "" {
		return nil, errors.New("macos-native: Options.Dir is required")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("macos-native: %w", err)
	}
	d := &Driver{dir: o.Dir, log: o.Logger, grace: o.StopGrace, children: map[string]*child{}}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.grace <= 0 {
		d.grace = DefaultStopGrace
	}
	for _, a := range o.Allowed {
		if !filepath.IsAbs(a) {
			return nil, fmt.Errorf("macos-native: allowed directory %q is not absolute", a)
		}
		d.allowed = append(d.allowed, filepath.Clean(a))
	}
	return d, nil
}

// Close stops the driver from recording exits of the processes it started;
// the processes themselves go on running. It does not block.
func (d *Driver) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	return nil
}

func (d *Driver) Name() string                  { return Name }
func (d *Driver) Isolation() protocol.Isolation { return protocol.IsolationProcess }

// Probe fails where the platform cannot run processes for this driver.
func (d *Driver) Probe(context.Context) error {
	if !supported {
		return fmt.Errorf("macos-native: %w: processes are not supported on this OS", drivers.ErrUnavailable)
	}
	return nil
}

// record is one instance as kept on disk.
type record struct {
	Workload string `json:"workload"`
	Attempt  int64  `json:"attempt"`
	Image    string `json:"image"`
	// Pid and StartTime identify the process; StartTime is the OS's
	// process start time (Linux: clock ticks since boot; darwin:
	// microseconds since the epoch), 0 when it could not be read.
	Pid           int       `json:"pid,omitempty"`
	StartTime     uint64    `json:"start_time,omitempty"`
	StartedAt     time.Time `json:"started_at,omitzero"`
	Starts        int       `json:"starts"`
	StopRequested bool      `json:"stop_requested,omitempty"`
	// ExitKnown is set when this driver reaped the process and recorded
	// its ExitCode.
	ExitKnown bool          `json:"exit_known,omitempty"`
	ExitCode  int           `json:"exit_code,omitempty"`
	ExitedAt  time.Time     `json:"exited_at,omitzero"`
	Failed    protocol.Code `json:"failed,omitempty"`
	Detail    string        `json:"detail,omitempty"`
}

// errImage is a reason the image cannot be had.
type errImage struct{ msg string }

func (e errImage) Error() string { return e.msg }

// ParseImage splits an "exec:" image into an absolute, cleaned program path
// and its arguments.
func ParseImage(image string) (path string, args []string, err error) {
	rest, ok := strings.CutPrefix(image, "exec:")
	if !ok {
		return "", nil, errImage{fmt.Sprintf("image %q: want exec:/absolute/program [arg ...]", image)}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, errImage{fmt.Sprintf("image %q: no program", image)}
	}
	if !filepath.IsAbs(f[0]) {
		return "", nil, errImage{fmt.Sprintf("image %q: program path %q is not absolute", image, f[0])}
	}
	return filepath.Clean(f[0]), f[1:], nil
}

// resolve checks the image against Allowed and the file system.
func (d *Driver) resolve(image string) (string, []string, error) {
	path, args, err := ParseImage(image)
	if err != nil {
		return "", nil, err
	}
	if len(d.allowed) > 0 {
		ok := false
		for _, a := range d.allowed {
			if rel, err := filepath.Rel(a, path); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && rel != "." {
				ok = true
				break
			}
		}
		if !ok {
			return "", nil, errImage{fmt.Sprintf("program %s is outside the allowed directories", path)}
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", nil, errImage{fmt.Sprintf("program %s: %v", path, err)}
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return "", nil, errImage{fmt.Sprintf("program %s is not an executable file", path)}
	}
	return path, args, nil
}

// DataDir is the workload's data directory.
func (d *Driver) DataDir(workload string) string {
	return filepath.Join(d.dir, instancefile.Name(workload), "data")
}

// LogPath is the file the workload's stdout is appended to.
func (d *Driver) LogPath(workload string) string {
	return filepath.Join(d.dir, instancefile.Name(workload), "log")
}

// StderrPath is the file the workload's stderr is appended to.
func (d *Driver) StderrPath(workload string) string {
	return filepath.Join(d.dir, instancefile.Name(workload), "log.stderr")
}

func (d *Driver) Start(ctx context.Context, spec drivers.Spec) error {
	if err := spec.Check(); err != nil {
		return fmt.Errorf("macos-native: start %s: %w", spec.Workload, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("macos-native: start %s: %w", spec.Workload, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err := d.load(spec.Workload)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("macos-native: start %s: %w", spec.Workload, err)
	}
	if r == nil {
		r = &record{Workload: spec.Workload}
	}
	r.Attempt = spec.Attempt
	if r.Failed == "" && d.liveLocked(r) {
		// Running (or a stop that did not finish): only the attempt changes.
		r.StopRequested = false
		return d.save(r)
	}
	// Start afresh, keeping the data.
	r.Image = spec.Image
	r.Pid, r.StartTime, r.StopRequested = 0, 0, false
	r.ExitKnown, r.ExitCode, r.ExitedAt = false, 0, time.Time{}
	r.Failed, r.Detail = "", ""
	if err := os.MkdirAll(d.DataDir(spec.Workload), 0o700); err != nil {
		return fmt.Errorf("macos-native: start %s: %w", spec.Workload, err)
	}
	path, args, err := d.resolve(spec.Image)
	if err != nil {
		r.Failed, r.Detail = protocol.CodeImageUnavailable, err.Error()
		d.log.Warn("macos-native: image unavailable", "workload", spec.Workload, "err", err)
		return d.save(r)
	}
	if len(spec.Command) > 0 {
		args = spec.Command
	}
	c, start, err := d.spawn(spec, path, args)
	if err != nil {
		r.Failed, r.Detail = protocol.CodeFailedStart, err.Error()
		d.log.Warn("macos-native: start failed", "workload", spec.Workload, "err", err)
		return d.save(r)
	}
	r.Pid, r.StartTime, r.StartedAt = c.Process.Pid, start, time.Now().UTC()
	r.Starts++
	ch := &child{pid: r.Pid, done: make(chan struct{})}
	d.children[spec.Workload] = ch
	go d.reap(spec.Workload, c, ch, start)
	d.log.Info("macos-native: started", "workload", spec.Workload, "attempt", spec.Attempt, "pid", r.Pid, "program", path)
	if err := d.save(r); err != nil {
		// The process runs but no record says so: kill it rather than
		// leave one nothing will list.
		_ = killGroup(r.Pid)
		return err
	}
	return nil
}

// spawn starts the program in its own session, in the data directory (or
// the spec's working directory inside it), with the spec's environment and
// output appended to the log.
func (d *Driver) spawn(spec drivers.Spec, path string, args []string) (*exec.Cmd, uint64, error) {
	workload := spec.Workload
	for _, p := range spec.Ports {
		// A process binds its ports itself: nothing here can map one.
		if p.Host != p.Container {
			return nil, 0, fmt.Errorf("port %s: a process cannot have its port mapped; want host and container equal", p)
		}
	}
	data := d.DataDir(workload)
	dir := inData(data, spec.Workdir)
	// Volumes are directories in the data directory at their path: kept
	// on Stop, deleted with the workload.
	for _, dirs := range append([]string{dir}, volumeDirs(data, spec.Volumes)...) {
		if err := os.MkdirAll(dirs, 0o700); err != nil {
			return nil, 0, err
		}
	}
	logf, err := os.OpenFile(d.LogPath(workload), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, err
	}
	defer logf.Close()
	errf, err := os.OpenFile(d.StderrPath(workload), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, err
	}
	defer errf.Close()
	c := exec.Command(path, args...)
	c.Dir = dir
	// Later entries win, so the driver's own variable cannot be
	// overridden (Validate refuses it anyway).
	c.Env = append(append(baseEnv(), spec.EnvList()...), "EINSORA_DATA="+data)
	c.Stdout, c.Stderr = logf, errf
	if err := startDetached(c); err != nil {
		return nil, 0, err
	}
	if err := setLimits(c.Process.Pid, spec.Resources); err != nil {
		// A workload must not run over a limit it was promised to: kill
		// it and say why.
		_ = killGroup(c.Process.Pid)
		_ = c.Wait()
		return nil, 0, fmt.Errorf("resource limits: %w", err)
	}
	start, err := procStart(c.Process.Pid)
	if err != nil {
		// Liveness only: the pid-reuse guard is off for this process.
		d.log.Warn("macos-native: no process start time", "workload", workload, "pid", c.Process.Pid, "err", err)
		start = 0
	}
	return c, start, nil
}

// inData is the path p of the workload (absolute, clean, checked by
// Validate) inside its data directory; "" is the data directory itself.
func inData(data, p string) string {
	if p == "" {
		return data
	}
	return filepath.Join(data, filepath.FromSlash(p))
}

func volumeDirs(data string, vs []protocol.Volume) []string {
	var out []string
	for _, v := range vs {
		out = append(out, inData(data, v.Path))
	}
	return out
}

// baseEnv is the part of the agent's environment a workload inherits: what
// programs commonly need, and none of the agent's own settings.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH", k == "HOME", k == "USER", k == "LOGNAME", k == "SHELL",
			k == "TMPDIR", k == "LANG", k == "TZ", strings.HasPrefix(k, "LC_"):
			env = append(env, kv)
		}
	}
	return env
}

// reap waits for a child and records its exit.
func (d *Driver) reap(workload string, c *exec.Cmd, ch *child, start uint64) {
	_ = c.Wait()
	code, detail := exitStatus(c.ProcessState)
	d.mu.Lock()
	defer d.mu.Unlock()
	defer close(ch.done)
	if d.children[workload] == ch {
		delete(d.children, workload)
	}
	if d.closed {
		return
	}
	r, err := d.load(workload)
	if err != nil || r.Pid != ch.pid || r.StartTime != start {
		return // removed or restarted meanwhile
	}
	r.ExitKnown, r.ExitCode, r.ExitedAt, r.Detail = true, code, time.Now().UTC(), detail
	if err := d.save(r); err != nil {
		d.log.Warn("macos-native: recording exit", "workload", workload, "err", err)
	}
	d.log.Info("macos-native: exited", "workload", workload, "pid", ch.pid, "code", code)
}

// liveLocked reports whether r's process still runs. A child of this driver
// counts as live until it is reaped and its exit recorded.
func (d *Driver) liveLocked(r *record) bool {
	if r.Pid <= 0 {
		return false
	}
	if c := d.children[r.Workload]; c != nil && c.pid == r.Pid {
		select {
		case <-c.done:
		default:
			return true
		}
	}
	if r.ExitKnown {
		return false
	}
	return alive(r.Pid, r.StartTime)
}

func (d *Driver) Stop(ctx context.Context, workload string) error {
	d.mu.Lock()
	r, err := d.load(workload)
	if errors.Is(err, os.ErrNotExist) {
		d.mu.Unlock()
		return nil
	}
	if err != nil {
		d.mu.Unlock()
		return fmt.Errorf("macos-native: stop %s: %w", workload, err)
	}
	live := r.Failed == "" && d.liveLocked(r)
	if !r.StopRequested {
		r.StopRequested = true
		if err := d.save(r); err != nil {
			d.mu.Unlock()
			return err
		}
	}
	var done <-chan struct{}
	if c := d.children[workload]; c != nil && c.pid == r.Pid {
		done = c.done
	}
	d.mu.Unlock()
	if !live {
		return nil
	}
	pid, start := r.Pid, r.StartTime
	d.log.Info("macos-native: stopping", "workload", workload, "pid", pid)
	if err := termGroup(pid); err != nil {
		d.log.Warn("macos-native: SIGTERM", "workload", workload, "pid", pid, "err", err)
	}
	if waitDead(ctx, pid, start, done, d.grace) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("macos-native: stop %s: %w", workload, err)
	}
	d.log.Warn("macos-native: grace period over, killing", "workload", workload, "pid", pid, "grace", d.grace)
	if alive(pid, start) {
		if err := killGroup(pid); err != nil {
			d.log.Warn("macos-native: SIGKILL", "workload", workload, "pid", pid, "err", err)
		}
	}
	if waitDead(ctx, pid, start, done, 0) {
		return nil
	}
	return fmt.Errorf("macos-native: stop %s: pid %d still alive: %w", workload, pid, ctx.Err())
}

// waitDead waits until the process is gone (and, for a child, reaped and
// recorded), for at most limit (0: until ctx ends). It reports whether the
// process is gone.
func waitDead(ctx context.Context, pid int, start uint64, done <-chan struct{}, limit time.Duration) bool {
	var timeout <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		timeout = t.C
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if done != nil {
			select {
			case <-done:
				return true
			default:
			}
		} else if !alive(pid, start) {
			return true
		}
		select {
		case <-done:
			return true
		case <-tick.C:
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func (d *Driver) Remove(ctx context.Context, workload string) error {
	if err := d.Stop(ctx, workload); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// The directory first: a crash in between leaves a record without
	// data, never data that a later Start would adopt.
	if err := os.RemoveAll(filepath.Join(d.dir, instancefile.Name(workload))); err != nil {
		return fmt.Errorf("macos-native: remove %s: %w", workload, err)
	}
	if err := os.Remove(instancefile.RecordPath(d.dir, workload)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("macos-native: remove %s: %w", workload, err)
	}
	return nil
}

func (d *Driver) List(ctx context.Context) ([]drivers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("macos-native: list: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("macos-native: list: %w", err)
	}
	var out []drivers.Instance
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		r, err := instancefile.Load[record](filepath.Join(d.dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("macos-native: list: %w", err)
		}
		out = append(out, d.instanceLocked(r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Workload < out[j].Workload })
	return out, nil
}

func (d *Driver) instanceLocked(r *record) drivers.Instance {
	in := drivers.Instance{Workload: r.Workload, Attempt: r.Attempt}
	switch {
	case r.Failed != "":
		in.State, in.Code, in.Detail = drivers.StateFailed, r.Failed, r.Detail
	case d.liveLocked(r):
		in.State, in.Detail = drivers.StateRunning, fmt.Sprintf("pid %d", r.Pid)
		if r.StopRequested {
			in.State = drivers.StateStopping
		}
	case r.StopRequested || r.Pid == 0:
		in.State, in.Detail = drivers.StateStopped, r.Detail
	case r.ExitKnown:
		in.State, in.ExitCode, in.Detail = drivers.StateExited, r.ExitCode, r.Detail
	default:
		in.State, in.ExitCode = drivers.StateExited, -1
		in.Detail = fmt.Sprintf("pid %d exited while the agent was not watching: exit code unknown", r.Pid)
	}
	return in
}

func (d *Driver) load(workload string) (*record, error) {
	return instancefile.Load[record](instancefile.RecordPath(d.dir, workload))
}

// save writes the record atomically.
func (d *Driver) save(r *record) error {
	if err := instancefile.Save(instancefile.RecordPath(d.dir, r.Workload), r); err != nil {
		return fmt.Errorf("macos-native: save %s: %w", r.Workload, err)
	}
	return nil
}
