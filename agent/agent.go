// Package agent is the node agent: it syncs with a hub and, beside the sync
// loop, applies the desired state it receives through drivers. The two loops
// share only the latest desired state and the latest statuses, so a slow
// driver never delays a sync and news from a driver cuts a waiting sync
// short.
package agent

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofrs/flock"

	"einsora.dev/edge/agent/logs"
	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// Config configures an agent. Zero durations take the defaults.
type Config struct {
	// StateDir holds the machine ID, the agent's state and its lock.
	StateDir  string
	Transport hubclient.Transport
	Drivers   *drivers.Host
	// Inventory probes the machine; the agent fills in Drivers.
	Inventory func(ctx context.Context) protocol.Inventory
	Clock     clock.Clock
	Logger    *slog.Logger
	Version   string
	// DriverTimeout bounds every driver call.
	DriverTimeout time.Duration
	// ApplyInterval is how often the apply loop looks at its drivers when
	// nothing else wakes it. Zero means DefaultApplyInterval, or
	// NotifiedApplyInterval when every driver notifies its changes.
	ApplyInterval time.Duration
	// InventoryInterval is how often inventory is probed again.
	InventoryInterval time.Duration
	// Backoff paces reconnects after failed syncs.
	Backoff hubclient.Backoff
	// RestartBackoff is the wait before a workload's first local restart
	// under its restart policy, doubled for each next one up to
	// RestartBackoffMax (defaults in restart.go).
	RestartBackoff    time.Duration
	RestartBackoffMax time.Duration
	// LogDir holds the rings of workload output (agent/logs); empty means
	// StateDir/logs. LogMaxBytes bounds each workload's ring; 0 means
	// logs.DefaultMaxBytes (10 MiB).
	LogDir      string
	LogMaxBytes int64
	// OnApplyPass, if set, is told each apply pass's duration (metrics).
	OnApplyPass func(time.Duration)
	// NewsGap is how long a held sync must have waited before news (a
	// status that changed) cuts it short, and the longest the agent waits
	// for its apply pass after a new desired state before it polls again:
	// each change costs the agent about two requests, the answer and the
	// report, whatever the drivers' news, so a correct agent stays far
	// from the hub's per-machine limit. Zero means DefaultNewsGap.
	NewsGap time.Duration
	// OnHubs, if set, is told the hub replicas' URLs each time the hub
	// sends a new list (hubclient.Failover.SetLearned).
	OnHubs func([]string)
}

// Defaults.
const (
	DefaultDriverTimeout     = 30 * time.Second
	DefaultApplyInterval     = 2 * time.Second
	DefaultInventoryInterval = 5 * time.Minute
	DefaultNewsGap           = time.Second
)

// Agent is a running node agent. Open it, Run it, Close it.
type Agent struct {
	cfg       Config
	log       *slog.Logger
	clk       clock.Clock
	machineID string
	lock      *flock.Flock
	started   time.Time
	bootID    string
	wakeApply chan struct{}
	reprobe   chan struct{}
	// newsCh says news arrived (cutShortLocked): it ends a held sync, or
	// the wait for an apply pass after a new desired state.
	newsCh    chan struct{}
	calls     calls
	restarts  restartBook
	logs      *logs.Store
	followers logFollowers
	uploads   uploads
	// lastPass is when the apply loop last finished a pass (Unix
	// nanoseconds, wall clock): the watchdog's sign of life.
	lastPass atomic.Int64
	// firstProbe is set once the drivers were first probed.
	firstProbe atomic.Bool

	// mu guards the following fields.
	mu sync.Mutex
	// state is what the agent persists.
	state *localState
	// statuses are the latest the apply loop published.
	statuses    map[string]protocol.Status
	appliedGen  int64
	inventory   *protocol.Inventory
	invHash     string
	invAcked    string
	prevStoreID string
	news        bool
	lastSync    time.Time
	lastSyncErr error
	// revoked is set while the hub refuses this machine as revoked.
	revoked bool
	// lastErr is each workload's last failed driver call.
	lastErr       map[string]DriverError
	errorsChanged bool
}

// Open takes the state directory's lock and loads the agent's state. A
// second agent on the same directory gets an error wrapping ErrLocked that
// names the process holding it.
func Open(cfg Config) (*Agent, error) {
	if cfg.StateDir == "" || cfg.Drivers == nil {
		return nil, errors.New("agent: state dir and drivers are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Inventory == nil {
		cfg.Inventory = func(context.Context) protocol.Inventory { return protocol.Inventory{} }
	}
	if cfg.DriverTimeout <= 0 {
		cfg.DriverTimeout = DefaultDriverTimeout
	}
	if cfg.ApplyInterval <= 0 {
		cfg.ApplyInterval = defaultApplyInterval(cfg.Drivers)
	}
	if cfg.InventoryInterval <= 0 {
		cfg.InventoryInterval = DefaultInventoryInterval
	}
	if cfg.NewsGap <= 0 {
		cfg.NewsGap = DefaultNewsGap
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("agent: state dir: %w", err)
	}
	lock, err := lockState(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	id, err := loadMachineID(cfg.StateDir)
	if err != nil {
		lock.Unlock()
		return nil, fmt.Errorf("agent: %w", err)
	}
	st, err := loadState(cfg.StateDir)
	if err != nil {
		lock.Unlock()
		return nil, fmt.Errorf("agent: %w", err)
	}
	logStore, err := openLogs(cfg)
	if err != nil {
		lock.Unlock()
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &Agent{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "agent"),
		clk:       cfg.Clock,
		machineID: id,
		lock:      lock,
		started:   cfg.Clock.Now(),
		bootID:    readBootID(),
		wakeApply: make(chan struct{}, 1),
		reprobe:   make(chan struct{}, 1),
		newsCh:    make(chan struct{}, 1),
		calls:     calls{busy: map[string]bool{}},
		state:     st,
		statuses:  map[string]protocol.Status{},
		lastErr:   loadLastErrors(cfg.StateDir),
		logs:      logStore,
	}
	return a, nil
}

// MachineID is the ID saved next to the agent's state.
func (a *Agent) MachineID() string { return a.machineID }

// Hubs is the hub replicas' URLs learned from the hub, kept in the state.
func (a *Agent) Hubs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.state.Hubs)
}

// Close closes the log store and releases the lock. Call it after Run
// returned.
func (a *Agent) Close() error { return errors.Join(a.logs.Close(), a.lock.Unlock()) }

// SetTransport sets the transport when it could not be made before Open:
// an enrolled agent's transport needs the key in the locked state directory.
// Call it before Run.
func (a *Agent) SetTransport(t hubclient.Transport) { a.cfg.Transport = t }

// Run runs the sync and apply loops until ctx is done.
func (a *Agent) Run(ctx context.Context) error {
	if a.cfg.Transport == nil {
		return errors.New("agent: no transport to a hub")
	}
	a.refreshInventory(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { a.syncLoop(ctx) })
	wg.Go(func() { a.applyLoop(ctx) })
	wg.Go(func() { a.inventoryLoop(ctx) })
	wg.Go(func() { a.wakeOnChanges(ctx) })
	wg.Wait()
	// Log follows and uploads end with ctx; none may write after Close.
	a.followers.wg.Wait()
	a.uploads.wg.Wait()
	return nil
}

// cutShortLocked delivers news: it ends a waiting sync (once it has waited
// NewsGap) so the next one carries it.
func (a *Agent) cutShortLocked() {
	a.news = true
	select {
	case a.newsCh <- struct{}{}:
	default:
	}
}

func (a *Agent) inventoryLoop(ctx context.Context) {
	for {
		t := a.clk.NewTimer(a.cfg.InventoryInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-a.reprobe:
			t.Stop()
		case <-t.C():
		}
		a.refreshInventory(ctx)
	}
}

// Reprobe asks for the inventory and the drivers to be probed again now (on
// SIGHUP, say); the inventory is sent to the hub only if it changed.
func (a *Agent) Reprobe() {
	select {
	case a.reprobe <- struct{}{}:
	default:
	}
}

// refreshInventory probes the machine and the drivers that answer now,
// makes those the offered drivers, and delivers the inventory when it
// changed. A driver that stops answering is dropped from the offer and its
// workloads are reported lost until it answers again.
func (a *Agent) refreshInventory(ctx context.Context) {
	inv := a.cfg.Inventory(ctx)
	inv.Drivers = nil
	inv.Features = slices.Clone(protocol.AgentFeatures)
	down := map[string]error{}
	for _, d := range a.cfg.Drivers.All() {
		if p, ok := d.(drivers.Prober); ok {
			if err := a.calls.do(ctx, "probe:"+d.Name(), a.cfg.DriverTimeout, p.Probe); err != nil {
				if ctx.Err() != nil {
					return
				}
				down[d.Name()] = err
				continue
			}
		}
		inv.Drivers = append(inv.Drivers, d.Name())
	}
	if len(inv.Drivers) == 0 {
		inv.Notes = append(inv.Notes, NoRuntimeNote(a.cfg.Drivers.Names()))
	}
	withdrawCapacity(&inv, a.cfg.Drivers)
	added, dropped := a.cfg.Drivers.Offer(inv.Drivers...)
	if a.firstProbe.CompareAndSwap(false, true) {
		// Every driver starts out offered: what the first probe drops
		// was never there, and nothing of it is lost.
		for _, n := range dropped {
			a.log.Info("driver not offered: its runtime does not answer", "driver", n, "err", down[n])
		}
		if len(inv.Drivers) == 0 {
			a.log.Warn("no driver answers; the agent runs and syncs but the hub can place nothing here", "fix", inv.Notes[len(inv.Notes)-1])
		}
	} else {
		for _, n := range added {
			a.log.Info("driver answers; offered to the hub", "driver", n)
		}
		for _, n := range dropped {
			a.log.Warn("driver does not answer; no longer offered, and its workloads are reported lost until it answers", "driver", n, "err", down[n])
		}
	}
	if len(added)+len(dropped) > 0 {
		select {
		case a.wakeApply <- struct{}{}:
		default:
		}
	}
	b, _ := json.Marshal(inv)
	sum := sha256.Sum256(b)
	hash := fmt.Sprintf("%x", sum)
	a.mu.Lock()
	defer a.mu.Unlock()
	if hash != a.invHash {
		a.inventory, a.invHash = &inv, hash
		a.cutShortLocked()
	}
}

func readBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Status is what `einsora-agent status` shows.
type Status struct {
	MachineID string `json:"machine_id"`
	StateDir  string `json:"state_dir"`
	Running   bool   `json:"running"`
	// Hub is the hub the agent enrolled with; empty for solo's agent.
	Hub string `json:"hub,omitempty"`
	// Hubs are the replicas' URLs the hub sent, failed over to after the
	// --hub flags.
	Hubs              []string `json:"hubs,omitempty"`
	StoreID           string   `json:"store_id,omitempty"`
	LastSync          string   `json:"last_sync,omitempty"`
	DesiredGeneration int64    `json:"desired_generation"`
	// Revoked is set when the hub revoked this machine, with what to do.
	Revoked *Revocation `json:"revoked,omitempty"`
	// Workloads are those the agent reports or holds, with their last
	// driver error.
	Workloads []WorkloadStatus `json:"workloads"`
}

// ReadStatus reads an agent's state directory without taking its lock.
func ReadStatus(dir string) (Status, error) {
	st := Status{StateDir: dir, Workloads: []WorkloadStatus{}}
	b, err := os.ReadFile(filepath.Join(dir, machineIDFile))
	if err != nil {
		return st, fmt.Errorf("no agent state in %s: %w", dir, err)
	}
	st.MachineID = strings.TrimSpace(string(b))
	ls, err := loadState(dir)
	if err != nil {
		return st, err
	}
	if ls.Desired != nil {
		st.StoreID, st.DesiredGeneration = ls.Desired.StoreID, ls.Desired.Generation
	}
	st.Hubs = ls.Hubs
	if e, err := ReadEnrollment(dir); err == nil {
		st.Hub = e.HubURL
	}
	st.Revoked = readRevoked(dir)
	if b, err := os.ReadFile(filepath.Join(dir, lastSyncFile)); err == nil {
		st.LastSync = strings.TrimSpace(string(b))
	}
	ws, err := readWorkloadsFile(dir)
	if err != nil {
		return st, err
	}
	st.Workloads = append(st.Workloads, ws...)
	for id := range ls.Workloads {
		// Held but not yet reported by a running agent.
		if !slices.ContainsFunc(ws, func(w WorkloadStatus) bool { return w.ID == id }) {
			st.Workloads = append(st.Workloads, WorkloadStatus{ID: id})
		}
	}
	slices.SortFunc(st.Workloads, func(x, y WorkloadStatus) int { return strings.Compare(x.ID, y.ID) })
	if running, err := probeRunning(dir); err == nil {
		st.Running = running
	}
	return st, nil
}
