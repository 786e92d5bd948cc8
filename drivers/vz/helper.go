package vz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"einsora.dev/edge/internal/atomicfile"
	"github.com/gofrs/flock"
)

// lockWait is how long a helper tries for its bundle's lock: the driver's
// liveness probe holds it shared for an instant.
const lockWait = 2 * time.Second

// ErrBundleBusy: another helper holds the bundle.
var ErrBundleBusy = errors.New("bundle is held by another helper")

// RunHelper is the helper process's life (einsora-agent vz-host): it holds
// the bundle's lock, writes the pid file, boots the VM with hv and answers
// the control socket until the VM stops, then records how it ended in
// exit.json. The process should be in a session of its own, so that it
// outlives the agent that started it.
func RunHelper(ctx context.Context, dir string, hv Hypervisor, log *slog.Logger) error {
	b := Bundle{Dir: dir}
	lock := flock.New(b.Lock())
	lctx, cancel := context.WithTimeout(ctx, lockWait)
	ok, err := lock.TryLockContext(lctx, 20*time.Millisecond)
	cancel()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("vz-host: lock %s: %w", b.Lock(), err)
	}
	if !ok {
		return fmt.Errorf("vz-host: %s: %w", dir, ErrBundleBusy)
	}
	defer lock.Unlock()

	cfg, err := loadConfig(b)
	if err != nil {
		return fmt.Errorf("vz-host: %w", err)
	}
	log = log.With("workload", cfg.Workload)
	h := &helper{b: b, cfg: cfg, log: log, state: HelperBooting}

	// The socket of a helper that died is stale: the lock says none runs.
	_ = os.Remove(b.Socket())
	ln, err := net.Listen("unix", b.Socket())
	if err != nil {
		return h.fail(ReasonHelperFailed, fmt.Errorf("control socket: %w", err))
	}
	defer os.Remove(b.Socket())
	defer ln.Close()
	if err := atomicfile.Write(b.PidFile(), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return h.fail(ReasonHelperFailed, fmt.Errorf("pid file: %w", err))
	}
	defer os.Remove(b.PidFile())
	go h.serve(ln)

	// SIGTERM asks for a graceful stop, like OpStop.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	signal.Ignore(syscall.SIGHUP)

	// A stop before the VM runs cancels the install and skips the boot.
	pre, cancel := context.WithCancel(ctx)
	defer cancel()
	h.mu.Lock()
	h.cancelPre = cancel
	h.mu.Unlock()
	if cfg.Guest == GuestMacOS {
		if _, err := os.Stat(b.Installed()); err != nil {
			h.set(HelperInstalling, 0)
			log.Info("vz-host: installing macOS", "ipsw", cfg.IPSW)
			err := hv.InstallMacOS(pre, b, cfg, cfg.IPSW, func(pct int) { h.set(HelperInstalling, pct) })
			if err != nil {
				return h.fail(ReasonInstallFailed, err)
			}
			if err := os.WriteFile(b.Installed(), nil, 0o600); err != nil {
				return h.fail(ReasonInstallFailed, err)
			}
		}
	}
	if pre.Err() != nil {
		log.Info("vz-host: stopped before boot")
		return h.finish("", "stopped before boot")
	}
	h.set(HelperBooting, 0)
	m, err := hv.Boot(ctx, b, cfg)
	if err != nil {
		if errors.Is(err, ErrLimitExceeded) {
			return h.fail(ReasonVMLimit, err)
		}
		return h.fail(ReasonBootFailed, err)
	}
	h.mu.Lock()
	h.m = m
	stopAsked := h.stopAsked
	h.mu.Unlock()
	h.set(HelperRunning, 0)
	log.Info("vz-host: VM running", "pid", os.Getpid(), "guest", cfg.Guest)
	if stopAsked {
		h.stop(false)
	}
	for {
		select {
		case <-m.Done():
			if err := m.Err(); err != nil {
				return h.fail(ReasonVMError, err)
			}
			h.set(HelperStopped, 0)
			log.Info("vz-host: guest stopped")
			return h.finish("", "")
		case <-sigs:
			h.stop(false)
		case <-ctx.Done():
			h.stop(true)
		}
	}
}

type helper struct {
	b   Bundle
	cfg *Config
	log *slog.Logger

	mu        sync.Mutex
	state     string
	progress  int
	m         Machine
	stopAsked bool
	cancelPre context.CancelFunc
}

func (h *helper) set(state string, pct int) {
	h.mu.Lock()
	h.state, h.progress = state, pct
	h.mu.Unlock()
}

// stop asks the guest to stop, or forces it.
func (h *helper) stop(force bool) {
	h.mu.Lock()
	m, cancelPre := h.m, h.cancelPre
	h.stopAsked = true
	if m != nil && h.state == HelperRunning {
		h.state = HelperStopping
	}
	h.mu.Unlock()
	if m == nil {
		// Asked before boot: the install, if any, is cancelled, and the VM
		// is stopped as soon as it is up.
		if cancelPre != nil {
			cancelPre()
		}
		return
	}
	var err error
	if force {
		h.log.Warn("vz-host: forcing the VM to stop")
		err = m.ForceStop()
	} else {
		h.log.Info("vz-host: asking the guest to stop")
		err = m.RequestStop()
	}
	if err != nil {
		h.log.Warn("vz-host: stop", "force", force, "err", err)
		if !force {
			// A guest that cannot be asked is told.
			_ = m.ForceStop()
		}
	}
}

func (h *helper) serve(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go serveConn(conn, h.handle)
	}
}

func (h *helper) handle(q Request) Response {
	switch q.Op {
	case OpStop:
		h.stop(false)
	case OpKill:
		h.stop(true)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return Response{State: h.state, Guest: h.cfg.Guest, Workload: h.cfg.Workload, Pid: os.Getpid(), Progress: h.progress}
}

// fail records a failure and returns it.
func (h *helper) fail(r Reason, err error) error {
	h.log.Error("vz-host: VM failed", "code", r, "err", err)
	if ferr := h.finish(r, err.Error()); ferr != nil {
		return ferr
	}
	return &Error{Reason: r, Err: err}
}

// finish writes exit.json.
func (h *helper) finish(r Reason, detail string) error {
	b, _ := json.Marshal(ExitRecord{Reason: r, Detail: trimDetail(detail), At: time.Now().UTC()})
	if err := atomicfile.Write(h.b.Exit(), b, 0o600); err != nil {
		return fmt.Errorf("vz-host: exit record: %w", err)
	}
	return nil
}
