// Package vz is the "vz" driver: each workload is a virtual machine of
// Apple's Virtualization.framework, run by a helper process of its own
// (einsora-agent vz-host) so that it outlives the agent. A Linux guest
// boots from a raw disk image; a macOS guest is restored from an IPSW.
//
// All of it is pure Go but shim_darwin.go, the Hypervisor over
// github.com/Code-Hex/vz/v3, built only on darwin with cgo; elsewhere the
// driver runs only with a helper that brings its own Hypervisor (tests).
// docs/drivers.md describes the image string, the bundle and the codes.
package vz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/protocol"
	"github.com/gofrs/flock"
)

// Name is the driver's name in the hub's driver table.
const Name = "vz"

// MaxMacOSGuests is how many macOS guests the OS runs at once.
const MaxMacOSGuests = 2

// Defaults of Options.
const (
	DefaultStopGrace    = 20 * time.Second
	DefaultForceWait    = 5 * time.Second
	DefaultHelperWait   = 30 * time.Second
	DefaultLimitBackoff = 5 * time.Minute
)

// Options configure a Driver.
type Options struct {
	// Dir is the driver's state under the agent's state directory: it
	// holds bundles/ and images/. Required.
	Dir    string
	Logger *slog.Logger
	Clock  clock.Clock
	// HTTPClient fetches images; nil is a plain client.
	HTTPClient *http.Client
	// HelperCommand makes the command that runs the helper for a bundle.
	// nil runs this executable as "vz-host --bundle DIR", which needs a
	// build with the shim (Available).
	HelperCommand func(bundle string) *exec.Cmd
	// StopGrace: how long Stop lets the guest shut down before forcing
	// it; ForceWait: how long after forcing before the helper is killed.
	StopGrace, ForceWait time.Duration
	// HelperWait bounds a new helper's wait to answer.
	HelperWait time.Duration
	// LimitBackoff is how long macOS capacity stays withdrawn after the OS
	// refused a guest while fewer than MaxMacOSGuests were alive.
	LimitBackoff time.Duration
}

// Driver is the vz driver.
type Driver struct {
	bundles string
	cache   *Cache
	log     *slog.Logger
	clk     clock.Clock
	opts    Options

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	ops      map[string]*op           // by workload: preparing or spawning
	corrupt  map[string]error         // by workload: bundles Start found corrupt
	children map[string]chan struct{} // by bundle dir: closed when our helper child is reaped
	adopted  int
	// Capacity withdrawn: the OS refused a macOS guest below the limit.
	blockedUntil time.Time
	blockedLive  int
	blockedWhy   string
}

// op is a Start's background work.
type op struct {
	cancel   context.CancelFunc
	done     chan struct{}
	progress string
}

var (
	_ drivers.Driver = (*Driver)(nil)
	_ drivers.Prober = (*Driver)(nil)
)

// New returns a driver over o.Dir and adopts every live helper there.
func New(o Options) (*Driver, error) {
	if o.Dir == "" {
		return nil, errors.New("vz: Options.Dir is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.StopGrace <= 0 {
		o.StopGrace = DefaultStopGrace
	}
	if o.ForceWait <= 0 {
		o.ForceWait = DefaultForceWait
	}
	if o.HelperWait <= 0 {
		o.HelperWait = DefaultHelperWait
	}
	if o.LimitBackoff <= 0 {
		o.LimitBackoff = DefaultLimitBackoff
	}
	bundles := filepath.Join(o.Dir, "bundles")
	if err := os.MkdirAll(bundles, 0o700); err != nil {
		return nil, fmt.Errorf("vz: %w", err)
	}
	cache, err := NewCache(filepath.Join(o.Dir, "images"), o.HTTPClient, o.Logger)
	if err != nil {
		return nil, err
	}
	d := &Driver{
		bundles: bundles, cache: cache, log: o.Logger, clk: o.Clock, opts: o,
		ops: map[string]*op{}, corrupt: map[string]error{}, children: map[string]chan struct{}{},
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.adopt()
	return d, nil
}

// adopt finds the helpers that outlived the last agent. Nothing needs
// doing to keep them: they hold their bundles; this checks each answers,
// so a restart reports what it found.
func (d *Driver) adopt() {
	for _, b := range d.scan() {
		if !live(b) {
			continue
		}
		cfg, err := loadConfig(b)
		if err != nil {
			d.log.Warn("vz: live helper with an unreadable bundle", "bundle", b.Dir, "code", reasonOf(err, ReasonBundleCorrupt), "err", err)
			continue
		}
		resp, err := Call(d.ctx, b.Socket(), OpState)
		if err != nil {
			d.log.Warn("vz: live helper does not answer", "workload", cfg.Workload, "code", reasonOf(err, ReasonHelperUnresponsive), "err", err)
			continue
		}
		d.adopted++
		d.log.Info("vz: adopted helper", "workload", cfg.Workload, "pid", resp.Pid, "state", resp.State)
	}
}

// Adopted is how many live helpers New found answering.
func (d *Driver) Adopted() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.adopted
}

// Close stops background work; helpers and their VMs run on.
func (d *Driver) Close() error {
	d.cancel()
	d.mu.Lock()
	ops := make([]*op, 0, len(d.ops))
	for _, o := range d.ops {
		ops = append(ops, o)
	}
	d.mu.Unlock()
	for _, o := range ops {
		<-o.done
	}
	return nil
}

func (d *Driver) Name() string                  { return Name }
func (d *Driver) Isolation() protocol.Isolation { return protocol.IsolationVM }

// Probe fails when this build cannot run VMs: no shim, or (on a Mac) a
// binary not signed with the virtualization entitlement, with which every
// VM would fail to start.
func (d *Driver) Probe(ctx context.Context) error {
	if d.opts.HelperCommand != nil {
		return nil
	}
	if !Available {
		return fmt.Errorf("vz: %w: this build has no Virtualization.framework support (darwin/arm64 with cgo only)", drivers.ErrUnavailable)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("vz: %w: %v", drivers.ErrUnavailable, err)
	}
	return checkEntitlement(ctx, exe, runCommand)
}

// entitlement is what Virtualization.framework requires of the process.
const entitlement = "com.apple.security.virtualization"

// codesignPath is absolute: a launchd daemon's PATH may lack /usr/bin.
const codesignPath = "/usr/bin/codesign"

func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// checkEntitlement asks codesign whether exe carries the entitlement.
func checkEntitlement(ctx context.Context, exe string, run func(context.Context, string, ...string) ([]byte, error)) error {
	out, err := run(ctx, codesignPath, "-d", "--entitlements", "-", exe)
	if err != nil {
		return fmt.Errorf("vz: %w: codesign -d %s: %v: %s", drivers.ErrUnavailable, exe, err, trimDetail(string(out)))
	}
	if !strings.Contains(string(out), entitlement) {
		return fmt.Errorf("vz: %w: %s is not signed with %s: codesign --force --sign - --entitlements packaging/homebrew/einsora-agent.entitlements %s",
			drivers.ErrUnavailable, exe, entitlement, exe)
	}
	return nil
}

// DataDir is the workload's data directory, shared with its guest.
func (d *Driver) DataDir(workload string) string { return bundleFor(d.bundles, workload).Data() }

// BundleDir is the workload's bundle.
func (d *Driver) BundleDir(workload string) string { return bundleFor(d.bundles, workload).Dir }

// live reports whether a helper holds b: its flock, which the OS drops
// when the process dies, so a reused pid never passes for a helper.
func live(b Bundle) bool {
	if _, err := os.Stat(b.Lock()); err != nil {
		return false
	}
	l := flock.New(b.Lock())
	ok, err := l.TryRLock()
	if err != nil {
		return false
	}
	if ok {
		_ = l.Unlock()
		return false
	}
	return true
}

// scan lists the bundles.
func (d *Driver) scan() []Bundle {
	entries, err := os.ReadDir(d.bundles)
	if err != nil {
		return nil
	}
	var out []Bundle
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, Bundle{Dir: filepath.Join(d.bundles, e.Name())})
		}
	}
	return out
}

// liveMacOS counts live helpers of macOS guests, and those being started.
func (d *Driver) liveMacOSLocked(except string) int {
	n := 0
	for _, b := range d.scan() {
		cfg, err := loadConfig(b)
		if err != nil || cfg.Guest != GuestMacOS || cfg.Workload == except {
			continue
		}
		if _, starting := d.ops[cfg.Workload]; starting || live(b) {
			n++
		}
	}
	return n
}

// MacOSCapacity is how many more macOS guests this machine can run now,
// for the inventory, and why it is none when the OS refused one below the
// limit (its counter is known to stick) until that clears.
func (d *Driver) MacOSCapacity() (free int, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.liveMacOSLocked("")
	if why := d.blockedLocked(n); why != "" {
		return 0, why
	}
	return max(0, MaxMacOSGuests-n), ""
}

// blockedLocked says why macOS capacity is withdrawn, "" when it is not.
// It clears after LimitBackoff, or once a guest alive then has stopped.
func (d *Driver) blockedLocked(liveNow int) string {
	if d.blockedWhy == "" {
		return ""
	}
	if !d.clk.Now().Before(d.blockedUntil) || liveNow < d.blockedLive {
		d.log.Info("vz: macOS VM capacity offered again")
		d.blockedWhy = ""
		return ""
	}
	return d.blockedWhy
}

func (d *Driver) Start(ctx context.Context, spec drivers.Spec) error {
	if spec.Workload == "" {
		return errors.New("vz: start: empty workload ID")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vz: start %s: %w", spec.Workload, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b := bundleFor(d.bundles, spec.Workload)
	cfg, err := loadConfig(b)
	switch {
	case errors.Is(err, os.ErrNotExist):
		cfg = &Config{Workload: spec.Workload}
	case err != nil:
		// Kept as it is for an operator to look at: never deleted but by
		// Remove.
		d.corrupt[spec.Workload] = err
		d.log.Error("vz: bundle unreadable", "workload", spec.Workload, "code", ReasonBundleCorrupt, "err", err)
		return fmt.Errorf("vz: start %s: %w", spec.Workload, err)
	}
	delete(d.corrupt, spec.Workload)
	cfg.Attempt = spec.Attempt
	if o := d.ops[spec.Workload]; o != nil || live(b) {
		// Under way, or a helper holds the bundle (even one whose start was
		// reported failed: it answered late): only the attempt changes.
		cfg.StopRequested = false
		if o == nil {
			cfg.Failed, cfg.Detail = "", ""
		}
		return saveConfig(b, cfg)
	}
	if err := ensureIdentity(b); err != nil {
		return d.failLocked(b, cfg, err)
	}
	img, err := ParseImage(spec.Image)
	if err != nil {
		cfg.Image = spec.Image
		return d.failLocked(b, cfg, err)
	}
	fresh := cfg.Starts == 0 && cfg.ImageDigest == ""
	cfg.Image, cfg.Guest = spec.Image, img.Guest
	cfg.CPUs, cfg.MemoryMB = spec.Resources.CPUs, spec.Resources.MemoryMB
	if fresh {
		cfg.DiskBytes = img.DiskBytes
	}
	cfg.StopRequested, cfg.Failed, cfg.Detail = false, "", ""
	if len(b.Socket()) > maxSocketPath {
		return d.failLocked(b, cfg, errorf(ReasonHelperFailed, "control socket path %s is over %d bytes: use a shorter state directory", b.Socket(), maxSocketPath))
	}
	if img.Guest == GuestMacOS {
		n := d.liveMacOSLocked(spec.Workload)
		if why := d.blockedLocked(n); why != "" {
			return d.failLocked(b, cfg, errorf(ReasonVMLimit, "macOS VM capacity withdrawn: %s", why))
		}
		if n >= MaxMacOSGuests {
			return d.failLocked(b, cfg, errorf(ReasonVMLimit, "%d macOS guests already run, the most the OS allows", n))
		}
	}
	if err := saveConfig(b, cfg); err != nil {
		return err
	}
	octx, cancel := context.WithCancel(d.ctx)
	o := &op{cancel: cancel, done: make(chan struct{}), progress: "preparing"}
	d.ops[spec.Workload] = o
	go d.run(octx, o, b, img)
	return nil
}

// failLocked records a failure before any helper ran.
func (d *Driver) failLocked(b Bundle, cfg *Config, err error) error {
	r := reasonOf(err, ReasonBootFailed)
	cfg.Failed, cfg.Detail = protocolCode(r), trimDetail(err.Error())
	d.log.Warn("vz: start failed", "workload", cfg.Workload, "code", r, "err", err)
	if _, serr := os.Stat(b.Dir); serr != nil {
		if merr := os.MkdirAll(b.Dir, 0o700); merr != nil {
			return fmt.Errorf("vz: start %s: %w", cfg.Workload, merr)
		}
	}
	return saveConfig(b, cfg)
}

// run is a Start's background work: the image, the disk, the helper.
func (d *Driver) run(ctx context.Context, o *op, b Bundle, img Image) {
	defer close(o.done)
	err := d.prepare(ctx, o, b, img)
	d.mu.Lock()
	defer d.mu.Unlock()
	for w, x := range d.ops {
		if x == o {
			delete(d.ops, w)
		}
	}
	cfg, lerr := loadConfig(b)
	if lerr != nil {
		d.log.Warn("vz: bundle gone while starting", "bundle", b.Dir, "err", lerr)
		return
	}
	if err == nil {
		cfg.Starts++
		cfg.StartedAt = d.clk.Now().UTC()
		if cfg.Guest == GuestMacOS {
			d.blockedWhy = ""
		}
		if serr := saveConfig(b, cfg); serr != nil {
			d.log.Warn("vz: saving bundle", "workload", cfg.Workload, "err", serr)
		}
		d.log.Info("vz: started", "workload", cfg.Workload, "attempt", cfg.Attempt, "guest", cfg.Guest)
		return
	}
	if ctx.Err() != nil && (cfg.StopRequested || d.ctx.Err() != nil) {
		// Stopped while starting, or the driver closed (agent restart):
		// not a failure; a helper already started is adopted next time.
		return
	}
	r := reasonOf(err, ReasonHelperFailed)
	if r == ReasonVMLimit && cfg.Guest == GuestMacOS {
		if n := d.liveMacOSLocked(cfg.Workload); n < MaxMacOSGuests {
			d.blockedWhy = fmt.Sprintf("the OS refused a macOS guest while %d ran (limit %d)", n, MaxMacOSGuests)
			d.blockedUntil = d.clk.Now().Add(d.opts.LimitBackoff)
			d.blockedLive = n
			d.log.Warn("vz: no macOS VM capacity offered until the OS's count clears", "code", ReasonVMLimit, "live", n)
		}
	}
	if ferr := d.failLocked(b, cfg, err); ferr != nil {
		d.log.Warn("vz: saving bundle", "workload", cfg.Workload, "err", ferr)
	}
}

func (d *Driver) setProgress(o *op, s string) {
	d.mu.Lock()
	o.progress = s
	d.mu.Unlock()
}

func (d *Driver) prepare(ctx context.Context, o *op, b Bundle, img Image) error {
	progress := func(step string, pct int) { d.setProgress(o, formatProgress(step, pct)) }
	d.mu.Lock()
	cfg, err := loadConfig(b)
	d.mu.Unlock()
	if err != nil {
		return err
	}
	switch img.Guest {
	case GuestLinux:
		if _, err := os.Stat(b.Disk()); err != nil {
			raw, digest, err := d.cache.Get(ctx, img, progress)
			if err != nil {
				return err
			}
			if err := makeDisk(ctx, b, raw, cfg.DiskBytes, progress); err != nil {
				return err
			}
			cfg.ImageDigest = digest
		}
	case GuestMacOS:
		if _, err := os.Stat(b.Installed()); err != nil {
			ipsw, digest, err := d.cache.Get(ctx, img, progress)
			if err != nil {
				return err
			}
			cfg.IPSW, cfg.ImageDigest = ipsw, digest
		}
	}
	d.mu.Lock()
	// Keep a StopRequested or attempt written meanwhile.
	if cur, err := loadConfig(b); err == nil {
		cur.ImageDigest, cur.IPSW, cur.DiskBytes = cfg.ImageDigest, cfg.IPSW, cfg.DiskBytes
		cfg = cur
	}
	err = saveConfig(b, cfg)
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.setProgress(o, "booting")
	return d.spawn(ctx, o, b)
}

// spawn starts the helper and waits until it runs the VM (or installs it).
func (d *Driver) spawn(ctx context.Context, o *op, b Bundle) error {
	_ = os.Remove(b.Exit())
	var cmd *exec.Cmd
	if d.opts.HelperCommand != nil {
		cmd = d.opts.HelperCommand(b.Dir)
	} else {
		exe, err := os.Executable()
		if err != nil {
			return errorf(ReasonHelperFailed, "finding this executable: %w", err)
		}
		cmd = exec.Command(exe, "vz-host", "--bundle", b.Dir)
	}
	logf, err := os.OpenFile(b.HelperLog(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return diskErr(err, "helper log")
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr, cmd.Stdin = logf, logf, nil
	// A session of its own: no signal to the agent's process group (a
	// launchd restart of the job) reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return errorf(ReasonHelperFailed, "starting helper: %w", err)
	}
	reaped := make(chan struct{})
	d.mu.Lock()
	d.children[b.Dir] = reaped
	d.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(reaped)
		d.mu.Lock()
		if d.children[b.Dir] == reaped {
			delete(d.children, b.Dir)
		}
		d.mu.Unlock()
	}()
	deadline := d.clk.NewTimer(d.opts.HelperWait)
	defer deadline.Stop()
	for {
		resp, err := Call(ctx, b.Socket(), OpState)
		if err == nil {
			switch resp.State {
			case HelperRunning, HelperStopping:
				return nil
			case HelperInstalling:
				d.setProgress(o, formatProgress("install", resp.Progress))
			}
		}
		select {
		case <-reaped:
			rec, ok := readExit(b)
			if ok && rec.Reason != "" {
				return errorf(rec.Reason, "%s", rec.Detail)
			}
			if ok {
				return nil // ran and stopped already: List says exited
			}
			return errorf(ReasonHelperFailed, "helper exited before it answered: see %s", b.HelperLog())
		case <-ctx.Done():
			if d.ctx.Err() == nil && !live(b) {
				// Stopped before the helper took its bundle: Stop cannot
				// see it yet, so it is ended here.
				_ = cmd.Process.Kill()
				<-reaped
			}
			return ctx.Err()
		case <-deadline.C():
			if resp.State == HelperInstalling {
				deadline.Reset(d.opts.HelperWait)
				continue
			}
			return errorf(ReasonHelperUnresponsive, "helper did not run the VM within %v: see %s", d.opts.HelperWait, b.HelperLog())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func readExit(b Bundle) (*ExitRecord, bool) {
	raw, err := os.ReadFile(b.Exit())
	if err != nil {
		return nil, false
	}
	var r ExitRecord
	if len(raw) > maxLine || json.Unmarshal(raw, &r) != nil {
		return &ExitRecord{Reason: ReasonBundleCorrupt, Detail: "exit.json unreadable"}, true
	}
	return &r, true
}

func (d *Driver) Stop(ctx context.Context, workload string) error {
	d.mu.Lock()
	b := bundleFor(d.bundles, workload)
	cfg, err := loadConfig(b)
	if errors.Is(err, os.ErrNotExist) {
		d.mu.Unlock()
		return nil
	}
	if err != nil {
		// Corrupt: its helper, if any, is still stopped.
		d.mu.Unlock()
		d.log.Warn("vz: stopping a workload with an unreadable bundle", "workload", workload, "code", ReasonBundleCorrupt, "err", err)
		return d.stopHelper(ctx, b, workload)
	}
	if !cfg.StopRequested {
		cfg.StopRequested = true
		if err := saveConfig(b, cfg); err != nil {
			d.mu.Unlock()
			return fmt.Errorf("vz: stop %s: %w", workload, err)
		}
	}
	o := d.ops[workload]
	d.mu.Unlock()
	if o != nil {
		o.cancel()
		select {
		case <-o.done:
		case <-ctx.Done():
			return fmt.Errorf("vz: stop %s: %w", workload, ctx.Err())
		}
	}
	return d.stopHelper(ctx, b, workload)
}

// stopHelper asks, then tells, then kills.
func (d *Driver) stopHelper(ctx context.Context, b Bundle, workload string) error {
	if !live(b) {
		return nil
	}
	d.log.Info("vz: stopping", "workload", workload)
	if _, err := Call(ctx, b.Socket(), OpStop); err != nil {
		d.log.Warn("vz: stop request", "workload", workload, "code", reasonOf(err, ReasonHelperUnresponsive), "err", err)
	}
	if d.waitGone(ctx, b, d.opts.StopGrace) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vz: stop %s: %w", workload, err)
	}
	d.log.Warn("vz: grace period over, forcing the VM off", "workload", workload, "grace", d.opts.StopGrace)
	if _, err := Call(ctx, b.Socket(), OpKill); err != nil {
		d.log.Warn("vz: kill request", "workload", workload, "code", reasonOf(err, ReasonHelperUnresponsive), "err", err)
	}
	if d.waitGone(ctx, b, d.opts.ForceWait) {
		return nil
	}
	if err := d.killHelper(b); err != nil {
		d.log.Warn("vz: killing helper", "workload", workload, "err", err)
	}
	if d.waitGone(ctx, b, d.opts.ForceWait) {
		return nil
	}
	return fmt.Errorf("vz: stop %s: helper still holds its bundle: %w", workload, errorf(ReasonHelperUnresponsive, "no answer to stop, kill or SIGKILL"))
}

// killHelper SIGKILLs the helper named by the pid file. The lock is
// checked first: while it is held the pid file names its holder.
func (d *Driver) killHelper(b Bundle) error {
	raw, err := os.ReadFile(b.PidFile())
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 || pid == os.Getpid() {
		return fmt.Errorf("pid file %q: not a helper's pid", strings.TrimSpace(string(raw)))
	}
	if !live(b) {
		return nil
	}
	d.log.Warn("vz: killing helper", "bundle", b.Dir, "pid", pid, "code", ReasonHelperUnresponsive)
	return syscall.Kill(pid, syscall.SIGKILL)
}

// waitGone waits until no helper holds b, for at most limit.
func (d *Driver) waitGone(ctx context.Context, b Bundle, limit time.Duration) bool {
	t := d.clk.NewTimer(limit)
	defer t.Stop()
	for {
		if !live(b) {
			d.mu.Lock()
			reaped := d.children[b.Dir]
			d.mu.Unlock()
			if reaped != nil {
				// Our child: wait for the reaper, so exit.json is final.
				select {
				case <-reaped:
				case <-time.After(time.Second):
				}
			}
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (d *Driver) Remove(ctx context.Context, workload string) error {
	if err := d.Stop(ctx, workload); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.corrupt, workload)
	if err := os.RemoveAll(bundleFor(d.bundles, workload).Dir); err != nil {
		return fmt.Errorf("vz: remove %s: %w", workload, err)
	}
	d.log.Info("vz: removed", "workload", workload)
	return nil
}

func (d *Driver) List(ctx context.Context) ([]drivers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("vz: list: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	type entry struct {
		b   Bundle
		cfg *Config
	}
	var entries []entry
	for _, b := range d.scan() {
		cfg, err := loadConfig(b)
		if errors.Is(err, os.ErrNotExist) {
			continue // a bundle being made, or half removed
		}
		if err != nil {
			d.log.Warn("vz: bundle unreadable, not listed", "bundle", b.Dir, "code", ReasonBundleCorrupt, "err", err)
			continue
		}
		entries = append(entries, entry{b, cfg})
	}
	// Helpers are asked at once, so a few that hang cost one control
	// timeout, not one each, while the lock is held.
	out := make([]drivers.Instance, len(entries))
	sem := make(chan struct{}, listParallel)
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for i, e := range entries {
		seen[e.cfg.Workload] = true
		if o := d.ops[e.cfg.Workload]; o != nil {
			out[i] = drivers.Instance{Workload: e.cfg.Workload, Attempt: e.cfg.Attempt, State: drivers.StateStarting, Progress: o.progress}
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			out[i] = instance(ctx, e.b, e.cfg)
			<-sem
		}()
	}
	wg.Wait()
	for w, err := range d.corrupt {
		if !seen[w] {
			out = append(out, drivers.Instance{Workload: w, State: drivers.StateFailed, Code: protocol.CodeFailedStart, Detail: trimDetail(err.Error())})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Workload < out[j].Workload })
	return out, nil
}

// listParallel bounds the helpers List asks at once.
const listParallel = 16

// instance is what a bundle with no Start under way shows.
func instance(ctx context.Context, b Bundle, cfg *Config) drivers.Instance {
	in := drivers.Instance{Workload: cfg.Workload, Attempt: cfg.Attempt}
	if cfg.Failed != "" {
		in.State, in.Code, in.Detail = drivers.StateFailed, cfg.Failed, cfg.Detail
		return in
	}
	if live(b) {
		resp, err := Call(ctx, b.Socket(), OpState)
		if err != nil {
			// Its VM may well run: never reported gone while it holds the
			// bundle.
			in.State, in.Detail = drivers.StateRunning, trimDetail(err.Error())
			if cfg.StopRequested {
				in.State = drivers.StateStopping
			}
			return in
		}
		switch resp.State {
		case HelperBooting:
			in.State, in.Progress = drivers.StateStarting, "booting"
		case HelperInstalling:
			in.State, in.Progress = drivers.StateStarting, formatProgress("install", resp.Progress)
		case HelperRunning:
			in.State, in.Detail = drivers.StateRunning, fmt.Sprintf("helper pid %d", resp.Pid)
		default:
			in.State = drivers.StateStopping
		}
		if cfg.StopRequested && in.State == drivers.StateRunning {
			in.State = drivers.StateStopping
		}
		return in
	}
	rec, ok := readExit(b)
	switch {
	case cfg.StopRequested || cfg.Starts == 0:
		in.State = drivers.StateStopped
		if ok {
			in.Detail = rec.Detail
		}
	case !ok:
		in.State, in.ExitCode = drivers.StateExited, -1
		in.Detail = string(ReasonHelperLost) + ": the helper died without recording why (killed?)"
	case rec.Reason == "":
		in.State = drivers.StateExited
	case rec.Reason == ReasonVMError:
		in.State, in.ExitCode, in.Detail = drivers.StateExited, 1, string(rec.Reason)+": "+rec.Detail
	default:
		in.State, in.Code, in.Detail = drivers.StateFailed, protocolCode(rec.Reason), string(rec.Reason)+": "+rec.Detail
	}
	return in
}
