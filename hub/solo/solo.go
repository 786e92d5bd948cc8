// Package solo runs a hub and an in-process agent for this machine in one
// process: the embedded default. The agent syncs through a function call
// instead of HTTPS, and runs exactly the code a networked agent runs.
package solo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/dashboard"
	"einsora.dev/edge/hub/httpapi"
	"einsora.dev/edge/hub/metrics"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/inventory"
	"einsora.dev/edge/protocol"
)

// Owner and region of the solo machine.
const (
	Tenant = "local"
	Region = "local"
)

// Options configures Run.
type Options struct {
	DataDir   string
	AdminAddr string
	// AdminInsecure lets the admin API listen beyond loopback, its token
	// crossing the network in cleartext; without it Run refuses.
	AdminInsecure bool
	// Drivers is a comma-separated list of drivers, or "auto" (see
	// agent.BuildDrivers).
	Drivers string
	Logger  *slog.Logger
	Version string
	// Ready, if set, is called with the admin API's URL once it listens.
	Ready func(adminURL string)
	// Hub tunes the hub; Store and Logger are set by Run.
	Hub hub.Config
	// Agent tunes the agent; StateDir, Transport, Drivers and Logger are
	// set by Run.
	Agent agent.Config
}

// AdminTokenFile is the file in the data directory that holds the admin
// token.
const AdminTokenFile = hub.AdminTokenFile

// Run runs hub and agent until ctx is done.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return fmt.Errorf("solo: data dir: %w", err)
	}
	token, err := LoadOrCreateToken(opts.DataDir)
	if err != nil {
		return fmt.Errorf("solo: %w", err)
	}
	clk := opts.Hub.Clock
	if clk == nil {
		clk = clock.Real{}
	}

	// The agent first: its lock says whether another solo already runs
	// on this data directory, before anything else is touched.
	agentDir := filepath.Join(opts.DataDir, "agent")
	id, err := agent.LoadMachineID(agentDir)
	if err != nil {
		return fmt.Errorf("solo: %w", err)
	}
	host, closeDrivers, err := agent.BuildDrivers(ctx, opts.Drivers, agentDir, id, clk, log)
	if err != nil {
		return fmt.Errorf("solo: %w", err)
	}
	defer closeDrivers()
	var h *hub.Hub
	var machineID string
	acfg := opts.Agent
	acfg.StateDir = filepath.Join(opts.DataDir, "agent")
	acfg.Drivers = host
	acfg.Logger = log
	acfg.Version = opts.Version
	if acfg.Clock == nil {
		acfg.Clock = clk
	}
	if acfg.Inventory == nil {
		prober := inventory.New(inventory.Options{Logger: log})
		acfg.Inventory = prober.Probe
	}
	acfg.Transport = hubclient.Func(func(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
		return h.Sync(ctx, machineID, req)
	})
	ag, err := agent.Open(acfg)
	if err != nil {
		return fmt.Errorf("solo: %w", err)
	}
	defer ag.Close()
	machineID = ag.MachineID()

	st, err := sqlite.Open(ctx, filepath.Join(opts.DataDir, "hub.db"))
	if err != nil {
		return fmt.Errorf("solo: %w", err)
	}
	defer st.Close()
	hcfg := opts.Hub
	hcfg.Store, hcfg.Logger, hcfg.Clock = st, log, clk
	// Solo is for development: its agent may well run the sim driver.
	hcfg.AllowSim = true
	m := metrics.New(metrics.Options{Version: opts.Version})
	hcfg.Metrics = m
	if hcfg.SecretKey, err = hub.LoadOrCreateSecretKey(opts.DataDir); err != nil {
		return fmt.Errorf("solo: %w", err)
	}
	if hcfg.HolderID == "" {
		// The agent's lock proves no other solo runs on this data
		// directory, so a restarted solo may take its own lease back at
		// once, even after a kill -9.
		hcfg.HolderID = "solo:" + machineID
	}
	h, err = hub.New(ctx, hcfg)
	if err != nil {
		return fmt.Errorf("solo: %w", err)
	}
	m.Watch(h)
	// The in-process agent's output is read in-process.
	h.SetLocalLogs(ag)
	if err := h.EnsureTenant(ctx, Tenant); err != nil {
		return fmt.Errorf("solo: %w", err)
	}
	hostname, _ := os.Hostname()
	if err := h.RegisterMachine(ctx, machineID, hostname, Tenant, Region); err != nil {
		return fmt.Errorf("solo: %w", err)
	}

	ln, err := net.Listen("tcp", opts.AdminAddr)
	if err != nil {
		return fmt.Errorf("solo: admin API: %w (is another hub running? pick another with --admin)", err)
	}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() && !opts.AdminInsecure {
		ln.Close()
		return fmt.Errorf("solo: --admin %s listens beyond loopback, where the admin token would cross the network in cleartext: keep it on loopback, or give --admin-insecure to accept that (einsora-hub serve offers TLS)", opts.AdminAddr)
	}
	// The dashboard too; solo has no agents' API, so its tokens page has
	// no address to show.
	mux := http.NewServeMux()
	mux.Handle(dashboard.Prefix, dashboard.New(dashboard.Config{Hub: h, AdminToken: token, Version: opts.Version, Clock: clk, Logger: log}))
	mux.Handle("GET /metrics", m.Handler())
	mux.Handle("/", httpapi.New(h, clk, log).AdminHandler(token))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	adminURL := "http://" + ln.Addr().String()
	log.Info("solo hub running", "admin", adminURL, "dashboard", adminURL+dashboard.Prefix, "data", opts.DataDir, "machine", machineID, "drivers", host.Names())
	if opts.Ready != nil {
		opts.Ready(adminURL)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() { errs <- h.Run(runCtx) })
	wg.Go(func() { errs <- runWhileLeading(runCtx, h, ag, log) })
	wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("admin API: %w", err)
			cancel()
		}
	})
	<-runCtx.Done()
	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	srv.Shutdown(shutdownCtx)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	log.Info("solo hub stopped")
	return errors.Join(all...)
}

// leader is the hub as runWhileLeading sees it.
type leader interface {
	Leadership() (leading bool, changed <-chan struct{})
}

// runner is the in-process agent as runWhileLeading sees it.
type runner interface {
	Run(ctx context.Context) error
}

// runWhileLeading runs the in-process agent only while this hub leads its
// region: a hub that steps down stops its agent, so two hubs on one store
// never run two agents for one machine.
func runWhileLeading(ctx context.Context, h leader, ag runner, log *slog.Logger) error {
	for {
		leading, changed := h.Leadership()
		if !leading {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				continue
			}
		}
		agentCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- ag.Run(agentCtx) }()
		select {
		case <-ctx.Done():
			stop()
			return <-done
		case <-changed:
			stop()
			if err := <-done; err != nil {
				return err
			}
			log.Info("in-process agent paused: leadership changed")
		}
	}
}

// LoadOrCreateToken reads the admin token from dir, making one the first
// time; see hub.LoadOrCreateAdminToken.
func LoadOrCreateToken(dir string) (string, error) { return hub.LoadOrCreateAdminToken(dir) }
