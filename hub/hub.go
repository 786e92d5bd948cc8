// Package hub is the compact control plane: it stores intent, places
// workloads on machines, and answers agents' long-polled syncs with each
// machine's complete desired state, computed from the store every time.
package hub

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/placement"
	"einsora.dev/edge/hub/store"
)

// Config configures a Hub. Zero durations take the defaults of ADR-0016.
type Config struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// PollTimeout is how long a sync is held when nothing changed.
	PollTimeout time.Duration
	// WriteBatch is the most machines a batch of writes takes in one
	// transaction: the group commit of agents' reports (reports) and the
	// presence batch (touch). 0 is all of them at once.
	WriteBatch int
	// OfflineAfter is how long a machine may be silent and still be
	// offered for placement.
	OfflineAfter time.Duration
	// ControllerInterval is how often the controller passes when nothing
	// wakes it.
	ControllerInterval time.Duration
	// OfflineFailAfter is how long a machine may be silent before its
	// running workloads fail and its stopping ones are stopped.
	OfflineFailAfter time.Duration
	// ProvisioningTimeout is how long a workload may provision without
	// progress before it fails.
	ProvisioningTimeout time.Duration
	// Region is the region whose controller this hub may be; "" is "local".
	// With Regions, it is the primary region (the one Leadership
	// reports): the first of Regions other than "*".
	Region string
	// Regions are the regions this hub may lead, each with its own
	// controller and lease (regions.go); AllRegions ("*") adds every
	// region that has a machine or a token. Empty means Region alone.
	Regions []string
	// HolderID names this hub process in the region's lease; "" makes one.
	HolderID string
	// LeaseTTL is how long a lease lasts unless renewed.
	LeaseTTL time.Duration
	// Drivers is the hub's driver table; nil means placement.DefaultDrivers.
	Drivers []placement.Driver
	// Metrics records wake latency, controller passes and placements;
	// nil records nothing.
	Metrics Metrics
	// AllowSim lets machines that offer the sim driver, which runs
	// nothing, sync; without it their syncs are refused (ErrSimRefused).
	// Development hubs (solo, tests) set it.
	AllowSim bool
	// CA signs machines' certificates at enrolment and renewal; nil for a
	// hub that enrols none (solo).
	CA *ca.CA
	// TimelineMax is how many lines a workload's timeline keeps (see
	// bounds.go); TimelineRetention how long the timeline of a removed
	// workload is kept (retention.go).
	TimelineMax       int
	TimelineRetention time.Duration
	// SecretKey (32 bytes, LoadOrCreateSecretKey) seals workloads' secret
	// environment in the store; nil refuses secrets.
	SecretKey []byte
	// URL is this replica's own agents' URL (https://HOST:PORT), as
	// agents reach this one process and not a load balancer in front of
	// several; "" when not known. Replicas publish it so agents can move
	// between them and a log upload can reach the replica that asked.
	URL string
}

// Defaults from ADR-0016 and the issues that refine it. The poll hold is
// long because it is not the sign of life: the connection's keepalive is
// (every 25 s, from the hub's kernel; WithSignOfLife), so a poll answered
// when nothing changed is just traffic. Ten minutes make polls a quarter
// of an idle agent's bytes and most of its hub CPU gone
// (docs/performance.md); a missed wake-up costs at most that long.
const (
	DefaultPollTimeout         = 10 * time.Minute
	DefaultOfflineAfter        = 45 * time.Second
	DefaultOfflineFailAfter    = 10 * time.Minute
	DefaultProvisioningTimeout = 15 * time.Minute
	DefaultControllerInterval  = 2 * time.Second
	DefaultLeaseTTL            = 15 * time.Second
	DefaultTimelineMax         = 1000
	DefaultTimelineRetention   = 7 * 24 * time.Hour
)

// Hub is one hub process's view of the store.
type Hub struct {
	store   store.Store
	clk     clock.Clock
	log     *slog.Logger
	cfg     Config
	drivers map[string]placement.Driver
	polls   polls
	reports reports
	// dropped counts what untrusted input was refused (bounds.go).
	dropped dropped

	// started is when this hub process started; presence judges machines
	// online or offline from it (rule 8).
	started  time.Time
	presence presence
	// feed writes this replica's presence batches (feed.go).
	feed *presenceFeed

	// backend runs what the controller places: this hub's agents.
	backend Backend
	// ctl is the primary region's controller; ctls holds every region's,
	// ctl among them, run by Run.
	ctl  *Controller
	ctls controllers
	// allRegions: this hub leads every region with a machine or token.
	allRegions bool

	// secrets seals and opens secret environment (hub/secrets.go).
	secrets *sealer
	// logs relays workload output from uploads to readers (hub/logs.go).
	logs logRelay

	// desired caches each machine's desired state under its generation
	// (machine ID → *protocol.SyncResponse), read without a global lock.
	desired sync.Map

	// replicas is the live replicas' URLs, sent to agents (hubs.go).
	replicas replicaList
	// refreshing is held through each RefreshReplicas: the loop's and a
	// drain's (Leave) may run at once, and the one that read the store
	// first must not set its list last.
	refreshing sync.Mutex
	// leaving is set when this replica drains (Leave).
	leaving atomic.Bool
	// busy, when set (SetBusy), says whether this replica turned
	// machines away for its own load lately.
	busy atomic.Pointer[func() bool]
	// counts is this replica's count of polls at its last refresh.
	counts countHistory
}

// New returns a hub over cfg.Store, seeding the default classes into a new
// store.
func New(ctx context.Context, cfg Config) (*Hub, error) {
	if cfg.Store == nil {
		return nil, errors.New("hub: no store")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PollTimeout <= 0 {
		cfg.PollTimeout = DefaultPollTimeout
	}
	if cfg.OfflineAfter <= 0 {
		cfg.OfflineAfter = DefaultOfflineAfter
	}
	if cfg.ControllerInterval <= 0 {
		cfg.ControllerInterval = DefaultControllerInterval
	}
	if cfg.OfflineFailAfter <= 0 {
		cfg.OfflineFailAfter = DefaultOfflineFailAfter
	}
	if cfg.ProvisioningTimeout <= 0 {
		cfg.ProvisioningTimeout = DefaultProvisioningTimeout
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.TimelineMax <= 0 {
		cfg.TimelineMax = DefaultTimelineMax
	}
	if cfg.TimelineRetention <= 0 {
		cfg.TimelineRetention = DefaultTimelineRetention
	}
	if cfg.Region == "" {
		for _, r := range cfg.Regions {
			if r != AllRegions && cfg.Region == "" {
				cfg.Region = r
			}
		}
	}
	if cfg.Region == "" {
		cfg.Region = "local"
	}
	if cfg.HolderID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		rand.Read(b[:])
		cfg.HolderID = fmt.Sprintf("%s/%d/%x", host, os.Getpid(), b)
	}
	if cfg.Drivers == nil {
		cfg.Drivers = placement.DefaultDrivers
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	secrets, err := newSealer(cfg.SecretKey)
	if err != nil {
		return nil, err
	}
	h := &Hub{
		secrets: secrets,
		store:   cfg.Store,
		clk:     cfg.Clock,
		log:     cfg.Logger.With("component", "hub"),
		cfg:     cfg,
		drivers: placement.DriverTable(cfg.Drivers),
		polls:   polls{waiting: make(map[string]*poll)},
		reports: reports{Limit: cfg.WriteBatch},
		started: cfg.Clock.Now(),
	}
	h.feed = newPresenceFeed(PresenceEvery(cfg.OfflineAfter))
	h.presence = presence{
		clk: cfg.Clock, offlineAfter: cfg.OfflineAfter, failAfter: cfg.OfflineFailAfter,
		started: h.started, held: h.polls.heardAt, feed: h.feed,
	}
	h.ctls.byName = map[string]*Controller{}
	h.addRegion(cfg.Region)
	for _, r := range cfg.Regions {
		if r == AllRegions {
			h.allRegions = true
		} else if r != "" && !h.addRegion(r) {
			return nil, fmt.Errorf("hub: more than %d regions", MaxRegions)
		}
	}
	h.ctl = h.ctls.byName[cfg.Region]
	h.backend = h.ctl.backend
	if err := h.seedClasses(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// StoreID is the store's ID, sent with every desired state.
func (h *Hub) StoreID() string { return h.store.ID() }

func (h *Hub) seedClasses(ctx context.Context) error {
	return h.store.Update(ctx, func(tx store.Tx) error {
		have, err := tx.Classes()
		if err != nil {
			return err
		}
		if len(have) > 0 {
			return nil
		}
		for _, c := range placement.DefaultClasses {
			if err := tx.PutClass(store.Class(c)); err != nil {
				return fmt.Errorf("seed class %s: %w", c.Name, err)
			}
		}
		return nil
	})
}

// Run runs the region's controller until ctx is done, and, when the store
// carries wake-ups between replicas, listens for them. It returns once
// every goroutine it started has stopped.
func (h *Hub) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { h.listenReplicas(ctx, &wg) })
	wg.Go(func() { h.touchLoop(ctx) })
	wg.Go(func() { h.replicaLoop(ctx) })
	return h.runControllers(ctx)
}

// Pass takes or renews each region's lease and runs one controller pass
// in those it leads (ErrNotLeader when none). Tests call it directly
// instead of Run.
func (h *Hub) Pass(ctx context.Context) error { return h.passAll(ctx) }

// Leadership reports whether this hub leads its primary region now, and a
// channel closed at the next change (LeadingRegions tells of every region).
func (h *Hub) Leadership() (leading bool, changed <-chan struct{}) { return h.ctl.Leadership() }
