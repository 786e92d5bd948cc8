package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// NetworkedConfig configures RunNetworked: an enrolled agent's daemon.
type NetworkedConfig struct {
	StateDir string
	// Drivers is the list BuildDrivers takes, e.g. "auto" or "sim".
	Drivers   string
	Inventory func(ctx context.Context) protocol.Inventory
	Logger    *slog.Logger
	Version   string
	// DockerHost is the Docker endpoint chosen once for the inventory and
	// the drivers alike (internal/dockerhost); empty resolves it again.
	DockerHost string
	// DriverTimeout bounds every driver call; zero is the default.
	DriverTimeout time.Duration
	// Hangup delivers SIGHUP: each asks for the drivers and the inventory
	// to be probed again at once. Nil means none.
	Hangup <-chan os.Signal
	// Hubs are further replicas of the hub, tried in turn after the one in
	// use fails on the hub's side (hubclient.Failover), before those the
	// hub itself told of (kept in the agent's state).
	Hubs []string
	// Observer, if set, wraps what the agent is made of (for metrics) and
	// serves beside it as a companion, stopped and waited for like the
	// others.
	Observer Observer
}

// Observer watches an agent from outside: it may wrap the agent's config
// (drivers, inventory probe, apply-pass hook) and its transport, and
// serves until ctx is done.
type Observer interface {
	Config(Config) Config
	Transport(hubclient.Transport) hubclient.Transport
	Serve(ctx context.Context, log *slog.Logger)
}

// RunNetworked runs an enrolled agent until ctx is done: it builds the
// drivers, takes the state directory's lock, opens the link to the hub and
// runs the agent with its companions (systemd notification, SIGHUP, the
// certificate's renewal). Every goroutine it starts is stopped and waited
// for before it returns, and the drivers are closed last.
func RunNetworked(ctx context.Context, cfg NetworkedConfig) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	id, err := LoadMachineID(cfg.StateDir)
	if err != nil {
		return err
	}
	host, closeDrivers, err := BuildDriversOn(ctx, cfg.Drivers, cfg.StateDir, id, cfg.DockerHost, clock.Real{}, log)
	if err != nil {
		return err
	}
	defer closeDrivers()
	// The lock before the hub: a second agent is told who holds it before
	// anything is sent anywhere.
	acfg := Config{
		StateDir: cfg.StateDir, Drivers: host, Inventory: cfg.Inventory, Logger: log, Version: cfg.Version,
		DriverTimeout: cfg.DriverTimeout,
	}
	if cfg.Observer != nil {
		acfg = cfg.Observer.Config(acfg)
	}
	a, err := Open(acfg)
	if err != nil {
		return err
	}
	defer a.Close()
	nw, err := OpenNetwork(cfg.StateDir, NetworkOptions{Logger: log})
	if errors.Is(err, ErrNotEnrolled) {
		return fmt.Errorf("%w; or run einsora-hub solo, which runs an agent for this machine in-process", err)
	}
	if err != nil {
		return err
	}
	defer nw.Transport().Close()
	// Always a failover: the hub may tell of replicas the command line
	// does not name, and a learned list outlives restarts.
	f, err := hubclient.NewFailover(nw.Transport(), cfg.Hubs)
	if err != nil {
		return fmt.Errorf("agent: --hub: %w", err)
	}
	f.SetLearned(a.Hubs())
	a.cfg.OnHubs = f.SetLearned
	if urls := f.URLs(); len(urls) > 1 {
		log.Info("hub replicas", "urls", urls)
	}
	var tr hubclient.Transport = f
	if cfg.Observer != nil {
		tr = cfg.Observer.Transport(tr)
	}
	a.SetTransport(tr)
	a.uploads.setUploader(nw.Transport()) // beside any wrapper of the syncs

	log.Info("agent running", "machine", a.MachineID(), "state", cfg.StateDir, "drivers", host.Names())
	companions := []func(context.Context){a.NotifyService, nw.RunRenewal}
	if cfg.Hangup != nil {
		companions = append(companions, func(ctx context.Context) { a.forwardHangups(ctx, cfg.Hangup) })
	}
	if cfg.Observer != nil {
		companions = append(companions, func(ctx context.Context) { cfg.Observer.Serve(ctx, log) })
	}
	if err := supervise(ctx, a.Run, companions...); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// supervise runs main and its companions until main returns or ctx is done,
// then stops the companions and waits for them: none outlives it.
func supervise(ctx context.Context, main func(context.Context) error, companions ...func(context.Context)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range companions {
		wg.Go(func() { c(ctx) })
	}
	err := main(ctx)
	cancel()
	wg.Wait()
	return err
}

// forwardHangups asks for a probe of the drivers and the inventory on each
// SIGHUP, until ctx is done.
func (a *Agent) forwardHangups(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			a.log.Info("SIGHUP: probing the drivers and the inventory again")
			a.Reprobe()
		}
	}
}
