// Package docker runs workloads as containers of a Docker Engine, through
// the Engine API client github.com/moby/moby/client with API-version
// negotiation (so an engine as old as API 1.40 answers).
//
// Everything the driver makes carries Einsora's labels, and List rebuilds
// its view from the engine, so an agent restart loses nothing and starts
// nothing twice. Containers and volumes without those labels are never
// listed or touched. What the engine cannot hold (labels are immutable) is
// kept in a small record in Options.StateDir: see record.go.
package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/internal/dockerhost"
	"einsora.dev/edge/protocol"
)

// Labels set on every container and volume the driver makes.
const (
	LabelWorkload = "dev.einsora.workload"
	// LabelAttempt is the attempt the container was created for. Labels
	// cannot change, so later attempts live in the driver's record.
	LabelAttempt = "dev.einsora.attempt"
	LabelDriver  = "dev.einsora.driver"
	// LabelMachine is the machine ID of the agent whose driver made it:
	// two agents on one engine (a fleet on one box, a test beside a
	// running agent) each see only their own.
	LabelMachine = "dev.einsora.machine"
	// LabelVolume is the spec's name of a named volume; the data volume
	// has none.
	LabelVolume = "dev.einsora.volume"
)

// Driver names: the plain variant and the gVisor one.
const (
	NameContainer = "docker"
	NameSandbox   = "docker-sandbox"
)

const (
	// SandboxRuntime is the OCI runtime the docker-sandbox variant uses.
	SandboxRuntime = "runsc"
	// NvidiaRuntime must be known to the engine for GPU workloads.
	NvidiaRuntime = "nvidia"
	// DataPath is where a workload's volume is mounted.
	DataPath = "/data"
	// NamePrefix begins the name of every container and volume made.
	NamePrefix = "einsora-"
	// LogDriver, LogMaxSize and LogMaxFiles bound the engine's copy of a
	// container's output: Docker's "local" driver, rotated, at most 3 × 5
	// MB. Without them the engine's default json-file log grows without
	// end.
	LogDriver   = "local"
	LogMaxSize  = "5m"
	LogMaxFiles = "3"
	// PidsLimit bounds the processes of one container, whatever its
	// class: enough for any service, few enough that a fork bomb cannot
	// starve the machine.
	PidsLimit = 4096
)

// Defaults for Options' time limits.
const (
	DefaultCallTimeout = 30 * time.Second
	DefaultStopGrace   = 10 * time.Second
	DefaultPullTimeout = 30 * time.Minute
)

// Options configure a Driver.
type Options struct {
	// Host is the engine's address, e.g. "unix:///var/run/docker.sock".
	// Empty means what dockerhost.Resolve chooses without a flag:
	// DOCKER_HOST, the current docker context, then the known sockets.
	Host string
	// Name is NameContainer (the default) or NameSandbox.
	Name string
	// Machine is the agent's machine ID. When set, everything the driver
	// makes carries it, and the driver lists and touches only what carries
	// it.
	Machine string
	// StateDir holds the driver's record of attempts and stop requests
	// (one small JSON file named after the driver). Empty keeps the record
	// in memory only: after an agent restart, List then reports the
	// attempt a container was created for and reads a container stopped
	// on request as exited, until the agent calls Start or Stop again.
	StateDir string
	Logger   *slog.Logger
	// CallTimeout bounds each engine call on top of the caller's context.
	CallTimeout time.Duration
	// StopGrace is how long Stop lets a workload exit after SIGTERM
	// before the engine kills it.
	StopGrace time.Duration
	// PullTimeout bounds a background image pull.
	PullTimeout time.Duration
}

// Driver is the Docker driver. Its methods are safe for concurrent use.
type Driver struct {
	name        string
	machine     string
	isolation   protocol.Isolation
	runtime     string // "" for the engine's default
	cli         *client.Client
	log         *slog.Logger
	callTimeout time.Duration
	stopGrace   time.Duration
	pullTimeout time.Duration
	rec         *records

	// ctx is the parent of background pulls; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// changes is made by the first Changes call; see events.go.
	changesOnce sync.Once
	changes     chan struct{}

	mu       sync.Mutex
	closed   bool
	pending  map[string]*pending // workloads without a container yet
	starting map[string]bool     // ContainerStart in flight
}

var (
	_ drivers.Driver = (*Driver)(nil)
	_ drivers.Prober = (*Driver)(nil)
)

// New returns a driver over the engine at o.Host. It does not contact the
// engine: Probe does.
func New(o Options) (*Driver, error) {
	d := &Driver{
		name:        o.Name,
		machine:     o.Machine,
		log:         o.Logger,
		callTimeout: o.CallTimeout,
		stopGrace:   o.StopGrace,
		pullTimeout: o.PullTimeout,
		pending:     make(map[string]*pending),
		starting:    make(map[string]bool),
	}
	switch d.name {
	case "", NameContainer:
		d.name, d.isolation = NameContainer, protocol.IsolationContainer
	case NameSandbox:
		d.isolation, d.runtime = protocol.IsolationSandbox, SandboxRuntime
	default:
		return nil, fmt.Errorf("docker: new: unknown driver name %q (want %q or %q)", o.Name, NameContainer, NameSandbox)
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.log = d.log.With("driver", d.name)
	if d.callTimeout <= 0 {
		d.callTimeout = DefaultCallTimeout
	}
	if d.stopGrace <= 0 {
		d.stopGrace = DefaultStopGrace
	}
	if d.pullTimeout <= 0 {
		d.pullTimeout = DefaultPullTimeout
	}

	// DOCKER_API_VERSION is deliberately not read: it would turn off
	// version negotiation.
	opts := []client.Opt{
		client.WithTLSClientConfigFromEnv(),
		client.WithHostFromEnv(),
		client.WithUserAgent("einsora-edge"),
	}
	host := o.Host
	if host == "" {
		// The same choice the agent's inventory makes.
		host = dockerhost.Resolve(dockerhost.FromOS("")).Host
	}
	opts = append(opts, client.WithHost(host))
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker: new: %w", err)
	}
	rec, err := loadRecords(o.StateDir, d.name, d.log)
	if err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("docker: new: %w", err)
	}
	d.cli, d.rec = cli, rec
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d, nil
}

// Close stops background pulls and releases the engine connection. The
// engine's containers are left as they are.
func (d *Driver) Close() error {
	d.mu.Lock()
	already := d.closed
	d.closed = true
	d.mu.Unlock()
	if already {
		return nil
	}
	d.cancel()
	d.wg.Wait()
	return d.cli.Close()
}

func (d *Driver) Name() string                  { return d.name }
func (d *Driver) Isolation() protocol.Isolation { return d.isolation }

// Probe checks that the engine answers, negotiating the API version, and
// for the sandbox variant that the engine has the runsc runtime.
func (d *Driver) Probe(ctx context.Context) error {
	cctx, cancel := d.call(ctx)
	defer cancel()
	if _, err := d.cli.Ping(cctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		// A failed negotiation (an engine older than API 1.40) is as
		// unusable as a silent one.
		return fmt.Errorf("docker: probe: %w: %w", drivers.ErrUnavailable, err)
	}
	if d.runtime == "" {
		return nil
	}
	runtimes, err := d.runtimes(ctx)
	if err != nil {
		return fmt.Errorf("docker: probe: %w", err)
	}
	if !slices.Contains(runtimes, d.runtime) {
		return fmt.Errorf("docker: probe: %w: engine has no %s runtime (has %s)",
			drivers.ErrUnavailable, d.runtime, strings.Join(runtimes, ", "))
	}
	return nil
}

// EngineInfo returns the engine's version and its OCI runtimes, sorted.
func (d *Driver) EngineInfo(ctx context.Context) (version string, runtimes []string, err error) {
	version, runtimes, err = d.engineInfo(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("docker: %w", err)
	}
	return version, runtimes, nil
}

func (d *Driver) engineInfo(ctx context.Context) (string, []string, error) {
	cctx, cancel := d.call(ctx)
	defer cancel()
	res, err := d.cli.Info(cctx, client.InfoOptions{})
	if err != nil {
		return "", nil, d.wrap(ctx, "engine info", err)
	}
	var runtimes []string
	for r := range res.Info.Runtimes {
		runtimes = append(runtimes, r)
	}
	sort.Strings(runtimes)
	return res.Info.ServerVersion, runtimes, nil
}

func (d *Driver) runtimes(ctx context.Context) ([]string, error) {
	_, rs, err := d.engineInfo(ctx)
	return rs, err
}

// Start implements drivers.Driver.
func (d *Driver) Start(ctx context.Context, spec drivers.Spec) error {
	w := spec.Workload
	if err := spec.Check(); err != nil {
		return fmt.Errorf("docker: start %s: %w", w, err)
	}
	if spec.Kind == protocol.KindVM {
		return fmt.Errorf("docker: start %s: kind %s is not a container", w, spec.Kind)
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fmt.Errorf("docker: start %s: driver closed", w)
	}
	// A pull under way owns the workload's creation; a failed one is
	// retried below.
	if p := d.pending[w]; p != nil {
		if p.state == drivers.StateStarting {
			p.attempt = spec.Attempt
			d.mu.Unlock()
			return nil
		}
		delete(d.pending, w)
	}
	d.mu.Unlock()

	c, err := d.inspect(ctx, w)
	if errors.Is(err, errForeign) {
		return fmt.Errorf("docker: start %s: %w", w, err)
	}
	if err != nil {
		return err
	}
	if c == nil {
		return d.create(ctx, spec)
	}
	e, _ := d.rec.get(w)
	if e.Container != c.ID {
		e = entry{}
	}
	switch c.State.Status {
	case container.StateRunning, container.StateRestarting, container.StatePaused:
		d.rec.set(w, entry{Container: c.ID, Attempt: spec.Attempt, Spec: e.Spec})
		return nil
	case container.StateRemoving:
		return fmt.Errorf("docker: start %s: container is being removed", w)
	}
	if e.Spec != "" && e.Spec != specHash(spec) {
		// Its image, class or spec changed while it was down: a
		// container's config cannot change, so it is made anew. The
		// volumes, which hold its data, stay.
		d.log.Info("recreating container for a changed spec", "workload", w, "attempt", spec.Attempt, "container", shortID(c.ID))
		cctx, cancel := d.call(ctx)
		_, err := d.cli.ContainerRemove(cctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		cancel()
		if err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("docker: start %s: %w", w, d.wrap(ctx, "remove container", err))
		}
		return d.create(ctx, spec)
	}
	// Created, exited or dead: start the same container, so its writable
	// layer and volume carry over.
	d.rec.set(w, entry{Container: c.ID, Attempt: spec.Attempt, Spec: e.Spec})
	d.log.Info("restarting container", "workload", w, "attempt", spec.Attempt, "container", shortID(c.ID))
	return d.startContainer(ctx, w, c.ID)
}

// create makes the workload's volume and container and starts it, or sets
// off a background pull when the image is missing.
func (d *Driver) create(ctx context.Context, spec drivers.Spec) error {
	w := spec.Workload
	if _, err := reference.ParseNormalizedNamed(spec.Image); err != nil {
		d.setFailed(spec, protocol.CodeImageUnavailable, fmt.Sprintf("image %q: %v", spec.Image, err))
		return fmt.Errorf("docker: start %s: image %q: %w", w, spec.Image, err)
	}
	hc, err := d.hostConfig(ctx, spec)
	if err != nil {
		if !errors.Is(err, drivers.ErrUnavailable) {
			d.setFailed(spec, protocol.CodeFailedStart, err.Error())
		}
		return fmt.Errorf("docker: start %s: %w", w, err)
	}
	err = d.createAndStart(ctx, spec, hc)
	switch {
	case errors.Is(err, errNoImage):
		d.startPull(spec, hc)
		return nil
	case err != nil && !errors.Is(err, drivers.ErrUnavailable) && ctx.Err() == nil:
		d.setFailed(spec, protocol.CodeFailedStart, err.Error())
	}
	if err != nil {
		return fmt.Errorf("docker: start %s: %w", w, err)
	}
	return nil
}

var errNoImage = errors.New("image not present")

// createAndStart creates the volume and container and starts it. It
// returns errNoImage when the engine lacks the image.
func (d *Driver) createAndStart(ctx context.Context, spec drivers.Spec, hc *container.HostConfig) error {
	w := spec.Workload
	if err := d.ensureVolume(ctx, w, VolumeName(w), ""); err != nil {
		return err
	}
	for _, v := range spec.Volumes {
		if err := d.ensureVolume(ctx, w, d.NamedVolume(w, v.Name), v.Name); err != nil {
			return err
		}
	}
	// The environment, secrets included, goes only into the container's
	// config: never into labels, and never logged.
	cfg := &container.Config{
		Image:      spec.Image,
		Cmd:        spec.Command,
		Env:        spec.EnvList(),
		WorkingDir: spec.Workdir,
		Labels: d.labels(map[string]string{
			LabelWorkload: w,
			LabelAttempt:  strconv.FormatInt(spec.Attempt, 10),
			LabelDriver:   d.name,
		}),
	}
	if len(spec.Ports) > 0 {
		cfg.ExposedPorts = network.PortSet{}
		for p := range hc.PortBindings {
			cfg.ExposedPorts[p] = struct{}{}
		}
	}
	cctx, cancel := d.call(ctx)
	res, err := d.cli.ContainerCreate(cctx, client.ContainerCreateOptions{
		Name:       ContainerName(w),
		Config:     cfg,
		HostConfig: hc,
	})
	cancel()
	if cerrdefs.IsNotFound(err) {
		return errNoImage
	}
	if err != nil {
		return d.wrap(ctx, "create container", err)
	}
	for _, warn := range res.Warnings {
		d.log.Warn("engine warning on create", "workload", w, "warning", warn)
	}
	d.rec.set(w, entry{Container: res.ID, Attempt: spec.Attempt, Spec: specHash(spec)})
	d.log.Info("created container", "workload", w, "attempt", spec.Attempt, "container", shortID(res.ID), "image", spec.Image)
	return d.startContainer(ctx, w, res.ID)
}

// hostConfig is the container's limits, volume, devices and runtime.
func (d *Driver) hostConfig(ctx context.Context, spec drivers.Spec) (*container.HostConfig, error) {
	init := true
	hc := &container.HostConfig{
		// The agent decides about restarts; the engine must not.
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Runtime:       d.runtime,
		// An init as PID 1 forwards SIGTERM to workloads that do not
		// handle it themselves, so Stop rarely needs the grace period.
		Init: &init,
		// The engine's own copy of the output is bounded too, in a
		// format its log API reads back (FollowLogs); the agent's ring
		// holds the rest.
		LogConfig: container.LogConfig{Type: LogDriver, Config: map[string]string{
			"max-size": LogMaxSize, "max-file": LogMaxFiles,
		}},
		Mounts: []mount.Mount{{
			Type:   mount.TypeVolume,
			Source: VolumeName(spec.Workload),
			Target: DataPath,
		}},
	}
	pids := int64(PidsLimit)
	hc.PidsLimit = &pids
	for _, v := range spec.Volumes {
		if v.Path == DataPath {
			return nil, fmt.Errorf("volume %s: %s is the workload's data volume", v.Name, DataPath)
		}
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Source: d.NamedVolume(spec.Workload, v.Name), Target: v.Path})
	}
	for _, p := range spec.Ports {
		cp, ok := network.PortFrom(uint16(p.Container), network.IPProtocol(p.Protocol()))
		if !ok {
			return nil, fmt.Errorf("port %s: not a port", p)
		}
		if hc.PortBindings == nil {
			hc.PortBindings = network.PortMap{}
		}
		hc.PortBindings[cp] = append(hc.PortBindings[cp], network.PortBinding{HostPort: strconv.Itoa(p.Host)})
	}
	r := spec.Resources
	if r.CPUs > 0 {
		hc.NanoCPUs = int64(r.CPUs) * 1e9
	}
	if r.MemoryMB > 0 {
		hc.Memory = int64(r.MemoryMB) << 20
		// No swap on top: the class's memory is the limit.
		hc.MemorySwap = hc.Memory
	}
	reqs, err := deviceRequests(r.Devices)
	if err != nil {
		return nil, err
	}
	if len(reqs) > 0 {
		runtimes, err := d.runtimes(ctx)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(runtimes, NvidiaRuntime) {
			return nil, fmt.Errorf("devices %v: engine has no %s runtime", r.Devices, NvidiaRuntime)
		}
		hc.DeviceRequests = reqs
	}
	return hc, nil
}

// deviceRequests turns "nvidia:<uuid>" devices into one device request. A
// MIG device's UUID is "MIG-...", which the NVIDIA runtime takes as is.
// Any other device is refused: the engine could not honour it.
func deviceRequests(devices []string) ([]container.DeviceRequest, error) {
	var ids []string
	for _, dev := range devices {
		vendor, id, ok := strings.Cut(dev, ":")
		if !ok || id == "" {
			return nil, fmt.Errorf("device %q: want vendor:id", dev)
		}
		if vendor != "nvidia" {
			return nil, fmt.Errorf("device %q: docker driver handles only nvidia devices", dev)
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return []container.DeviceRequest{{
		Driver:       "nvidia",
		DeviceIDs:    ids,
		Capabilities: [][]string{{"gpu"}},
	}}, nil
}

// ensureVolume creates one of the workload's volumes (its data volume when
// named is "", else the spec's volume of that name), refusing one of that
// name that Einsora did not make: its data is not ours to mount.
func (d *Driver) ensureVolume(ctx context.Context, w, name, named string) error {
	cctx, cancel := d.call(ctx)
	defer cancel()
	labels := d.labels(map[string]string{LabelWorkload: w, LabelDriver: d.name})
	if named != "" {
		labels[LabelVolume] = named
	}
	res, err := d.cli.VolumeCreate(cctx, client.VolumeCreateOptions{Name: name, Labels: labels})
	if err != nil {
		return d.wrap(ctx, "create volume", err)
	}
	// Creating an existing volume returns it unchanged.
	if !d.owns(res.Volume.Labels, w) || res.Volume.Labels[LabelVolume] != named {
		return fmt.Errorf("create volume %s: %w", name, errForeign)
	}
	return nil
}

func (d *Driver) startContainer(ctx context.Context, w, id string) error {
	d.mu.Lock()
	d.starting[w] = true
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.starting, w)
		d.mu.Unlock()
	}()
	cctx, cancel := d.call(ctx)
	defer cancel()
	if _, err := d.cli.ContainerStart(cctx, id, client.ContainerStartOptions{}); err != nil {
		return d.wrap(ctx, "start container", err)
	}
	return nil
}

// Stop implements drivers.Driver.
func (d *Driver) Stop(ctx context.Context, w string) error {
	if err := d.dropPending(ctx, w); err != nil {
		return fmt.Errorf("docker: stop %s: %w", w, err)
	}
	c, err := d.inspect(ctx, w)
	if errors.Is(err, errForeign) {
		d.log.Warn("not stopping a container einsora did not make", "workload", w, "name", ContainerName(w))
		return nil
	}
	if err != nil || c == nil {
		return err
	}
	// Recorded first, so that once it is down it reads as stopped, not
	// exited, even if the agent dies meanwhile.
	e, _ := d.rec.get(w)
	if e.Container != c.ID {
		e = entry{}
	}
	d.rec.set(w, entry{Container: c.ID, Attempt: d.attempt(w, c.ID, c.Config.Labels), Stopped: true, Spec: e.Spec})
	if !c.State.Running && !c.State.Restarting {
		return nil
	}
	grace := int((d.stopGrace + time.Second - 1) / time.Second)
	cctx, cancel := context.WithTimeout(ctx, d.stopGrace+d.callTimeout)
	defer cancel()
	d.log.Info("stopping container", "workload", w, "container", shortID(c.ID))
	if _, err := d.cli.ContainerStop(cctx, c.ID, client.ContainerStopOptions{Timeout: &grace}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker: stop %s: %w", w, d.wrap(ctx, "stop container", err))
	}
	return nil
}

// Remove implements drivers.Driver.
func (d *Driver) Remove(ctx context.Context, w string) error {
	if err := d.dropPending(ctx, w); err != nil {
		return fmt.Errorf("docker: remove %s: %w", w, err)
	}
	c, err := d.inspect(ctx, w)
	switch {
	case errors.Is(err, errForeign):
		d.log.Warn("not removing a container einsora did not make", "workload", w, "name", ContainerName(w))
	case err != nil:
		return err
	case c != nil:
		cctx, cancel := d.call(ctx)
		_, err := d.cli.ContainerRemove(cctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		cancel()
		if err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("docker: remove %s: %w", w, d.wrap(ctx, "remove container", err))
		}
		d.log.Info("removed container", "workload", w, "container", shortID(c.ID))
	}
	if err := d.removeVolume(ctx, w); err != nil {
		return fmt.Errorf("docker: remove %s: %w", w, err)
	}
	if err := d.removeNamedVolumes(ctx, w); err != nil {
		return fmt.Errorf("docker: remove %s: %w", w, err)
	}
	d.rec.remove(w)
	return nil
}

func (d *Driver) removeVolume(ctx context.Context, w string) error {
	name := VolumeName(w)
	cctx, cancel := d.call(ctx)
	defer cancel()
	res, err := d.cli.VolumeInspect(cctx, name, client.VolumeInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return d.wrap(ctx, "inspect volume", err)
	}
	if !d.owns(res.Volume.Labels, w) {
		d.log.Warn("not removing a volume einsora did not make", "workload", w, "volume", name)
		return nil
	}
	if _, err := d.cli.VolumeRemove(cctx, name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		return d.wrap(ctx, "remove volume", err)
	}
	return nil
}

// removeNamedVolumes removes the spec's volumes of w: every volume that
// carries w's labels and a volume name, whatever spec made it.
func (d *Driver) removeNamedVolumes(ctx context.Context, w string) error {
	cctx, cancel := d.call(ctx)
	defer cancel()
	f := client.Filters{}.Add("label", LabelWorkload+"="+w, LabelDriver+"="+d.name, LabelVolume)
	if d.machine != "" {
		f = f.Add("label", LabelMachine+"="+d.machine)
	}
	res, err := d.cli.VolumeList(cctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return d.wrap(ctx, "list volumes", err)
	}
	for _, v := range res.Items {
		if !d.owns(v.Labels, w) || v.Name != d.NamedVolume(w, v.Labels[LabelVolume]) {
			continue
		}
		if _, err := d.cli.VolumeRemove(cctx, v.Name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			return d.wrap(ctx, "remove volume "+v.Name, err)
		}
	}
	return nil
}

// List implements drivers.Driver. It reads the engine's labelled
// containers, adding the workloads still pulling or failed before having
// one.
func (d *Driver) List(ctx context.Context) ([]drivers.Instance, error) {
	cctx, cancel := d.call(ctx)
	res, err := d.cli.ContainerList(cctx, client.ContainerListOptions{
		All:     true,
		Filters: d.filters(),
	})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("docker: list: %w", d.wrap(ctx, "list containers", err))
	}
	var out []drivers.Instance
	seen := make(map[string]bool)
	for _, s := range res.Items {
		w := s.Labels[LabelWorkload]
		// Labels alone could be copied; the name is unique per engine.
		if !slices.Contains(s.Names, "/"+ContainerName(w)) || seen[w] {
			continue
		}
		inst := drivers.Instance{Workload: w, Attempt: d.attempt(w, s.ID, s.Labels)}
		var st *container.State
		if s.State != container.StateRunning {
			cctx, cancel := d.call(ctx)
			ir, err := d.cli.ContainerInspect(cctx, s.ID, client.ContainerInspectOptions{})
			cancel()
			if cerrdefs.IsNotFound(err) {
				continue // removed meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("docker: list: %w", d.wrap(ctx, "inspect container", err))
			}
			st = ir.Container.State
		}
		if st == nil {
			st = &container.State{Status: s.State, Running: s.State == container.StateRunning}
		}
		e, _ := d.rec.get(w)
		d.mu.Lock()
		starting := d.starting[w]
		d.mu.Unlock()
		describe(&inst, st, e.Container == s.ID && e.Stopped, starting)
		seen[w] = true
		out = append(out, inst)
	}
	d.mu.Lock()
	for w, p := range d.pending {
		if seen[w] {
			continue
		}
		out = append(out, drivers.Instance{
			Workload: w, Attempt: p.attempt, State: p.state,
			Code: p.code, Progress: p.progress, Detail: p.detail,
		})
	}
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Workload < out[j].Workload })
	return out, nil
}

// describe sets inst's state from the engine's state of its container.
// stopped says the agent asked for the stop; starting that a start is in
// flight.
func describe(inst *drivers.Instance, st *container.State, stopped, starting bool) {
	switch st.Status {
	case container.StateRunning, container.StateRestarting, container.StatePaused:
		inst.State = drivers.StateRunning
		if stopped {
			inst.State = drivers.StateStopping
		}
		if st.Status != container.StateRunning {
			inst.Detail = string(st.Status)
		}
		return
	case container.StateRemoving:
		inst.State, inst.Detail = drivers.StateStopping, "removing"
		return
	}
	// Created, exited or dead.
	switch {
	case starting:
		inst.State = drivers.StateStarting
	case st.Error != "":
		// The engine could not start it (a missing executable, a bad
		// runtime); a later successful start clears the error.
		inst.State, inst.Code = drivers.StateFailed, protocol.CodeFailedStart
		inst.Detail = clip(st.Error)
	case stopped:
		inst.State = drivers.StateStopped
	case st.Status == container.StateCreated:
		// Made but never started: an agent that died between create and
		// start. Stopped invites the agent to start it.
		inst.State, inst.Detail = drivers.StateStopped, "created, never started"
	default:
		inst.State, inst.ExitCode, inst.OOMKilled = drivers.StateExited, st.ExitCode, st.OOMKilled
		if st.Status == container.StateDead {
			inst.Detail = "dead"
		}
	}
}

// attempt is the workload's current attempt: the record's when it is
// about this very container, else the label the container was made with.
func (d *Driver) attempt(w, id string, labels map[string]string) int64 {
	if e, ok := d.rec.get(w); ok && e.Container == id {
		return e.Attempt
	}
	n, _ := strconv.ParseInt(labels[LabelAttempt], 10, 64)
	return n
}

// errForeign marks a container or volume of Einsora's name that Einsora
// did not make.
var errForeign = errors.New("exists but was not made by einsora")

// inspect returns the workload's container, nil when there is none, and
// errForeign when its name is taken by a container not ours.
func (d *Driver) inspect(ctx context.Context, w string) (*container.InspectResponse, error) {
	cctx, cancel := d.call(ctx)
	defer cancel()
	res, err := d.cli.ContainerInspect(cctx, ContainerName(w), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("docker: %w", d.wrap(ctx, "inspect container "+ContainerName(w), err))
	}
	c := &res.Container
	if c.Config == nil || c.State == nil || !d.owns(c.Config.Labels, w) {
		return nil, fmt.Errorf("container %s %w", ContainerName(w), errForeign)
	}
	return c, nil
}

// labels adds the machine's label to ls.
func (d *Driver) labels(ls map[string]string) map[string]string {
	if d.machine != "" {
		ls[LabelMachine] = d.machine
	}
	return ls
}

func (d *Driver) filters() client.Filters {
	f := client.Filters{}.Add("label", LabelWorkload, LabelDriver+"="+d.name)
	if d.machine != "" {
		f = f.Add("label", LabelMachine+"="+d.machine)
	}
	return f
}

func (d *Driver) owns(labels map[string]string, w string) bool {
	return labels[LabelWorkload] == w && labels[LabelDriver] == d.name && labels[LabelMachine] == d.machine
}

// call bounds one engine call by the caller's context and CallTimeout.
func (d *Driver) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.callTimeout)
}

// wrap prefixes err with op and marks it unavailable when the engine
// itself did not answer.
func (d *Driver) wrap(ctx context.Context, op string, err error) error {
	if unavailable(ctx, err) {
		return fmt.Errorf("%s: %w: %w", op, drivers.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func unavailable(ctx context.Context, err error) bool {
	if client.IsErrConnectionFailed(err) || cerrdefs.IsUnavailable(err) {
		return true
	}
	// Our per-call timeout ran out while the caller still waits: the
	// engine is not answering.
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op)
}

// nameChars are what the engine accepts in a name after its first
// character, which NamePrefix supplies.
var nameChars = regexp.MustCompile(`^[a-zA-Z0-9_.-]+$`)

// ContainerName is the container's name for workload w: NamePrefix and the
// ID itself when the engine accepts it as part of a name, else a
// sanitised prefix of it and a hash of the whole.
func ContainerName(w string) string {
	if nameChars.MatchString(w) && len(w) <= 128 {
		return NamePrefix + w
	}
	clean := []byte(w)
	for i, c := range clean {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			clean[i] = '_'
		}
	}
	if len(clean) > 64 {
		clean = clean[:64]
	}
	sum := sha256.Sum256([]byte(w))
	return NamePrefix + string(clean) + "-" + hex.EncodeToString(sum[:6])
}

// VolumeName is the name of workload w's data volume.
func VolumeName(w string) string { return ContainerName(w) }

// specHash sums what a container is created from: image, class and
// workload spec (the restart policy aside, which is the agent's). It is kept
// in the driver's record (mode 0600, beside the agent's state, which holds
// the spec itself), never in a label: it sums secrets too.
func specHash(spec drivers.Spec) string {
	ws := spec.WorkloadSpec
	ws.Restart = nil
	b, _ := json.Marshal(struct {
		Image     string
		Kind      protocol.Kind
		Resources protocol.Resources
		Spec      protocol.WorkloadSpec
	}{spec.Image, spec.Kind, spec.Resources, ws})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// NamedVolume is the engine's name for the spec's volume called name of
// workload w: the container's name, the volume's, and a short hash of the
// machine ID when there is one, so agents sharing an engine keep apart.
func (d *Driver) NamedVolume(w, name string) string {
	n := ContainerName(w) + ".v." + name
	if d.machine != "" {
		sum := sha256.Sum256([]byte(d.machine))
		n += ".m" + hex.EncodeToString(sum[:4])
	}
	return n
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// clip bounds text reported in an Instance.
func clip(s string) string {
	if len(s) <= protocol.MaxDetail {
		return s
	}
	return strings.ToValidUTF8(s[:protocol.MaxDetail-3], "") + "..."
}
