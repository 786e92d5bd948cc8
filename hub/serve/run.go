package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/dashboard"
	"einsora.dev/edge/hub/httpapi"
	"einsora.dev/edge/hub/metrics"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/postgres"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

// minOfflineAfter is the shortest --offline-after Run takes.
const minOfflineAfter = 5 * time.Second

// Options configures Run.
type Options struct {
	DataDir string
	// Store is a PostgreSQL URL for several replicas; "" is SQLite in
	// DataDir. Replicas on PostgreSQL share one CA: give them one DataDir
	// content (copy it) so their certificates agree.
	Store     string
	Listen    string
	AdminAddr string
	// AdminTLSCert and AdminTLSKey are PEM files the admin API serves
	// HTTPS with. Without them it serves plain HTTP, which Run refuses
	// beyond loopback unless AdminInsecure says the operator accepts the
	// admin token crossing the network in cleartext.
	AdminTLSCert  string
	AdminTLSKey   string
	AdminInsecure bool
	// Region is the primary region; Regions every region this hub may
	// lead ("*": every region with a machine or a token). Empty Regions
	// means Region alone.
	Region  string
	Regions []string
	// Names are the host names and addresses agents dial the hub by; the
	// server certificate holds them, the host name and DefaultNames.
	Names   []string
	DrainTo string
	Logger  *slog.Logger
	// ClientCertLifetime is how long machines' certificates are valid;
	// zero means 30 days.
	ClientCertLifetime time.Duration
	// Hub tunes the hub; Store, CA, Region, Logger and Clock are set by Run.
	Hub    hub.Config
	Limits Limits
	// Ready, if set, is called once both APIs listen.
	Ready func(adminURL, agentURL string)
	// Version is the hub's, for the dashboard and build info.
	Version string
}

// Run runs a networked hub until ctx is done, then drains: waiting agents
// are told to reconnect (to DrainTo, if set) before it returns.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.Store != "" && !strings.HasPrefix(opts.Store, "postgres://") && !strings.HasPrefix(opts.Store, "postgresql://") {
		return errorf("--store %s: want postgres://…, or leave it out to use SQLite in --data", redact(opts.Store))
	}
	if opts.DrainTo != "" {
		if err := checkDrainTo(opts.DrainTo); err != nil {
			return err
		}
	}
	// Presence batches go every third of --offline-after, to the second,
	// and a held poll's keepalives fit in what is left (KeepAliveIdleFor)
	// with a second to spare only from 5 s.
	if d := opts.Hub.OfflineAfter; d < 0 || d > 0 && d < minOfflineAfter {
		return errorf("--offline-after %s: want at least %s", d, minOfflineAfter)
	}
	if d := opts.Hub.OfflineFailAfter; d < 0 {
		return errorf("--offline-fail-after %s: want a positive duration", d)
	}
	if opts.Hub.URL != "" {
		if err := checkReplicaURL(opts.Hub.URL); err != nil {
			return err
		}
	}
	adminTLS, err := adminTLSConfig(opts)
	if err != nil {
		return err
	}
	if err := privateDir(opts.DataDir, log); err != nil {
		return err
	}
	token, err := hub.LoadOrCreateAdminToken(opts.DataDir)
	if err != nil {
		return errorf("%w", err)
	}
	secretKey, err := hub.LoadOrCreateSecretKey(opts.DataDir)
	if err != nil {
		return errorf("%w", err)
	}
	clk := opts.Hub.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	authority, err := ca.Open(ca.Options{Dir: opts.DataDir, Clock: clk, ClientLifetime: opts.ClientCertLifetime})
	if err != nil {
		return errorf("%w", err)
	}
	st, err := openStore(ctx, opts)
	if err != nil {
		return errorf("%w", err)
	}
	defer st.Close()
	m := metrics.New(metrics.Options{Version: opts.Version})
	hcfg := opts.Hub
	hcfg.Store, hcfg.CA, hcfg.Region, hcfg.Regions, hcfg.Logger, hcfg.Clock = timeStore(st, m, clk), authority, opts.Region, opts.Regions, log, clk
	hcfg.Metrics = m
	hcfg.SecretKey = secretKey
	hcfg.WriteBatch = writeBatch(opts.Store)
	h, err := hub.New(ctx, hcfg)
	if err != nil {
		return errorf("%w", err)
	}
	m.Watch(h)
	m.WatchBounds(h.Counters)
	// Readiness follows the primary region, the first one led.
	primary := h.Regions()[0]
	health := &Health{Store: st, Leader: h, Lease: "controller:" + primary, Clock: clk}

	adminLn, err := net.Listen("tcp", opts.AdminAddr)
	if err != nil {
		return errorf("admin API: %w (is another hub running? pick another with --admin)", err)
	}
	defer adminLn.Close()
	if host, _, _ := net.SplitHostPort(adminLn.Addr().String()); !net.ParseIP(host).IsLoopback() {
		if adminTLS == nil && !opts.AdminInsecure {
			return errorf("--admin %s listens beyond loopback, where the admin token would cross the network in cleartext: give --admin-tls-cert and --admin-tls-key, or --admin-insecure to accept that", opts.AdminAddr)
		}
		log.Warn("the admin API listens beyond loopback; anyone who reaches it with the admin token administers the hub",
			"admin", adminLn.Addr(), "tls", adminTLS != nil)
	}
	agentLn, err := ListenFor(ctx, opts.Listen, opts.Hub.OfflineAfter)
	if err != nil {
		return errorf("agents' API: %w (pick another address with --listen)", err)
	}
	names := certNames(opts.Names, agentLn)
	cert, err := authority.ServerCertificate(names)
	if err != nil {
		agentLn.Close()
		return errorf("%w", err)
	}
	srv := NewServer(Config{
		Hub: h, CA: authority, Certificate: cert, Clock: clk, Logger: log,
		PollTimeout: opts.Hub.PollTimeout, OfflineAfter: opts.Hub.OfflineAfter, DrainTo: opts.DrainTo, Limits: opts.Limits,
		Metrics: m, Readyz: health.Readyz,
	})
	m.WatchQueue(srv.Queued)
	lim := opts.Limits.withDefaults(runtime.GOMAXPROCS(0))
	admin := &http.Server{
		Handler:           nil, // set below, with the dashboard,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    16 << 10,
		TLSConfig:         adminTLS,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	adminURL := "http://" + adminLn.Addr().String()
	if adminTLS != nil {
		adminURL = "https://" + adminLn.Addr().String()
		adminLn = tls.NewListener(adminLn, adminTLS)
	}
	agentsURL := agentURL(agentLn, names)
	dash := dashboard.New(dashboard.Config{Hub: revokeCounter{Hub: h, m: m}, AdminToken: token, AgentURL: agentsURL,
		Version: opts.Version, Clock: clk, Logger: log})
	// The admin API has its own budget and wrong-token throttle; the
	// dashboard answers its own sign-in.
	api := guardAdmin(countRevocations(m, httpapi.New(h, clk, log).AdminHandler(token)), lim, clk)
	admin.Handler = adminMux(api, dash, m.Handler(), health)
	fp := authority.Fingerprint()
	log.Info("hub serving", "admin", adminURL, "dashboard", adminURL+dashboard.Prefix, "agents", agentsURL, "regions", opts.Regions, "primary", primary, "data", opts.DataDir,
		"ca_fingerprint", strings.ToLower(encodeFP(fp[:])), "names", names)
	if opts.Ready != nil {
		opts.Ready(adminURL, agentsURL)
	}

	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() { errs <- h.Run(runCtx) })
	wg.Go(func() {
		if err := admin.Serve(adminLn); !errors.Is(err, http.ErrServerClosed) {
			errs <- errorf("admin API: %w", err)
		}
	})
	agentDone := make(chan struct{})
	wg.Go(func() {
		defer close(agentDone)
		if err := srv.Serve(agentLn); err != nil {
			errs <- errorf("agents' API: %w", err)
		}
	})
	select {
	case <-ctx.Done():
	case <-agentDone:
	}
	drainCtx, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	srv.Drain(drainCtx)
	admin.Shutdown(drainCtx)
	cancel()
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		if err != nil {
			all = append(all, err)
		}
	}
	log.Info("hub stopped")
	return errors.Join(all...)
}

func checkDrainTo(s string) error {
	if !strings.HasPrefix(s, "https://") || strings.ContainsAny(s, " \t\n") {
		return errorf("--drain-to %q: want the https:// URL of the hub the agents should move to", s)
	}
	return nil
}

// checkReplicaURL refuses a --url agents would not keep (protocol.CheckHubURL).
func checkReplicaURL(s string) error {
	if err := protocol.CheckHubURL(s); err != nil {
		return errorf("--url %q: want the https://HOST:PORT URL agents reach this replica at, e.g. https://hub-2.example.net:8443 (%v)", s, err)
	}
	return nil
}

// certNames is what the server certificate must cover: the given names,
// the address listened on if it is a specific one, the host name, and the
// loopback names.
func certNames(given []string, ln net.Listener) []string {
	names := slices.Clone(given)
	if host, _, err := net.SplitHostPort(ln.Addr().String()); err == nil {
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
			names = append(names, ip.String())
		}
	}
	if hn, err := os.Hostname(); err == nil && hn != "" {
		names = append(names, strings.ToLower(hn))
	}
	names = append(names, DefaultNames...)
	out := names[:0]
	seen := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// redact hides a store URL's password.
func redact(s string) string {
	if i := strings.Index(s, "@"); i >= 0 {
		if j := strings.Index(s, "://"); j >= 0 && j < i {
			return s[:j+3] + "…" + s[i:]
		}
	}
	return s
}

func encodeFP(b []byte) string {
	const hexdigits = "0123456789ABCDEF"
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(':')
		}
		sb.WriteByte(hexdigits[c>>4])
		sb.WriteByte(hexdigits[c&15])
	}
	return sb.String()
}

// adminTLSConfig loads the admin API's certificate, if it has one.
func adminTLSConfig(opts Options) (*tls.Config, error) {
	if opts.AdminTLSCert == "" && opts.AdminTLSKey == "" {
		return nil, nil
	}
	if opts.AdminTLSCert == "" || opts.AdminTLSKey == "" {
		return nil, errorf("give both --admin-tls-cert and --admin-tls-key, or neither")
	}
	cert, err := tls.LoadX509KeyPair(opts.AdminTLSCert, opts.AdminTLSKey)
	if err != nil {
		return nil, errorf("admin TLS: %w (want PEM files of a certificate and its key)", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}

// privateDir makes the data directory, or narrows an existing one, to its
// owner alone: it holds the CA's key, the admin token and the store.
func privateDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return errorf("data dir: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return errorf("data dir: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return errorf("data dir %s is open to others (mode %o) and could not be narrowed: %w", dir, st.Mode().Perm(), err)
		}
		log.Warn("narrowed the data directory to its owner", "data", dir, "was", fmt.Sprintf("%o", st.Mode().Perm()))
	}
	return nil
}

// writeBatch is the most machines the hub's batches of writes (agents'
// reports, the presence batch) take in one transaction on the store named
// by --store: on SQLite, all of them (one writer; a commit each is the
// cost), on PostgreSQL postgres.WriteBatch.
func writeBatch(storeURL string) int {
	if storeURL == "" {
		return 0
	}
	return postgres.WriteBatch
}

// openStore opens SQLite in the data directory, or PostgreSQL, through which
// several replicas share intent and wake-ups.
func openStore(ctx context.Context, opts Options) (store.Store, error) {
	if opts.Store == "" {
		return sqlite.Open(ctx, filepath.Join(opts.DataDir, "hub.db"))
	}
	return postgres.Open(ctx, opts.Store)
}
