// Package fleetbench measures a hub with a fleet of simulated agents: each
// has its own certificate and loopback source address and syncs over real
// mutual TLS with the project's hubclient, all in this process, against a
// real einsora-hub serve process. Every figure is measured again against a
// stock Go TLS long-poll server in the same run, so ratios are measured,
// not remembered. docs/performance.md says how to run it and what it found.
package fleetbench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/internal/testnet"
)

// Config configures a run.
type Config struct {
	// N is the number of simulated agents.
	N int
	// HubBin is the einsora-hub binary; Self is this program, started
	// again as the baseline server.
	HubBin, Self string
	// Window is how long idle CPU and traffic are measured: at least one
	// poll hold of the hub (10 minutes by default) for a fair count of
	// polls.
	Window time.Duration
	// Changes is the number of single-workload changes measured.
	Changes int
	// ChangeEvery, when set, starts the changes this far apart, as a
	// steady flow of changes would come, so that the phase meets the
	// server's collections about as often as such a flow would; 0 starts
	// each as soon as the last is woken.
	ChangeEvery time.Duration
	// HTTP1 makes the agents offer only HTTP/1.1, and HTTP2 only HTTP/2
	// (as an agent with replicas does), to compare the servers' cost per
	// held poll. By default they offer both, as an agent does, and each
	// server chooses: the hub HTTP/1.1 on Linux, the baseline HTTP/2.
	HTTP1, HTTP2 bool
	// Park also measures the baseline parking its held polls: each poll's
	// connection taken from net/http over HTTP/1.1 while it is held, so
	// that no goroutine waits on it (a design's memory per held poll,
	// measured before the hub would take it).
	Park bool
	// Replicas, when above 1, also measures that many einsora-hub serve
	// processes on one PostgreSQL database, agents spread over them, and
	// one hub on that database, before the baseline.
	Replicas int
	// Store is the PostgreSQL URL (postgres://…) the hubs use, each
	// target in a schema of its own; "" starts a throwaway server when
	// Replicas asks for one, else the hub uses SQLite.
	Store string
	// ConnectLimit bounds the cold connect and the restart; 0 is 10 min.
	ConnectLimit time.Duration
	// Rebalance, with Replicas, is how long after the restart the agents
	// each replica holds are counted again: the agents the crash sent to
	// the others are sent back to the restarted one in rounds of 10 s
	// (docs/operations.md, "Replicas even out their agents"). 0 skips it.
	Rebalance time.Duration
	// HandshakeTimeout, when set, is the hubs' --handshake-timeout: the
	// time a peer has for each of its turns in a TLS handshake. The
	// bench's agents share the hub's cores, so past a few thousand at once
	// they answer the hub's flight far later than any real agent would
	// (each has its own CPU), and the hub's default of 2 s measures the
	// bench's own queue; the baseline has no deadline at all.
	HandshakeTimeout time.Duration
	// HubFlags are more flags for every hub of the run (not the
	// baseline), to measure a setting against its default.
	HubFlags []string
	// BurstBatch is how many workloads the burst creates per admin call
	// (at most adminapi.MaxCreateBatch; 1 is a call each, 16 at a time).
	BurstBatch int
	// Dir holds the hub's data and logs.
	Dir string
	Out io.Writer
}

// hubArgs are the flags every hub of the run gets beyond its own.
func (cfg Config) hubArgs() []string {
	var args []string
	if cfg.HandshakeTimeout > 0 {
		args = append(args, "--handshake-timeout", cfg.HandshakeTimeout.String())
	}
	return append(args, cfg.HubFlags...)
}

// Limits that bound every wait of a run.
const (
	maxN        = 60000
	maxReplicas = 16
	// fdHeadroom is what a process holds besides its agents' sockets:
	// the hub's store, logs, listeners and admin connections.
	fdHeadroom    = 512
	connectLimit  = 10 * time.Minute
	maxConnect    = time.Hour
	maxPaced      = time.Hour
	changeLimit   = 30 * time.Second
	burstLimit    = 10 * time.Minute
	settle        = 3 * time.Second
	restartSettle = 2 * time.Second
)

// result is one target's figures.
type result struct {
	enrolPerSec    float64
	cold           time.Duration
	coldDials      float64
	rssPerAgentKiB float64
	// rssEndPerAgentKiB is the same at the idle window's end: the
	// collections at idle have shrunk the held polls' stacks by then.
	rssEndPerAgentKiB float64
	// heapEndPerAgentKiB is the servers' live heap after a collection at
	// the idle window's end, less the same before the agents connected:
	// what an agent costs the server, whatever the collector's phase.
	heapEndPerAgentKiB    float64
	idleCPUPerAgentHour   time.Duration
	idleBytesPerAgentHour float64
	// idleWirePerAgentHour adds the TCP/IP headers of every segment, the
	// keepalives' bare ones included; negative where the host's count of
	// segments cannot be read.
	idleWirePerAgentHour float64
	cpuPerChange         time.Duration
	wakeP50, wakeP99     time.Duration
	// metGC is how many changes' wakes overlapped a collection of the
	// server; quietP99 is the p99 of the others.
	metGC    int
	quietP99 time.Duration
	// The wakes whose change was made on another replica than the one
	// holding the agent's poll, and those made on that one.
	crossP50, crossP99 time.Duration
	sameP50, sameP99   time.Duration
	nCross, nSame      int
	replicas           int
	burst              time.Duration
	restart            time.Duration
	restartDials       float64
	errs               int64
}

// Run measures the hub (and, with Replicas, the replicas and one hub on
// PostgreSQL), then the baseline, and prints the table.
func Run(ctx context.Context, cfg Config) error {
	if cfg.N < 1 || cfg.N > maxN {
		return fmt.Errorf("fleetbench: N=%d: want 1 to %d", cfg.N, maxN)
	}
	if cfg.Replicas > maxReplicas {
		return fmt.Errorf("fleetbench: -replicas %d: want at most %d", cfg.Replicas, maxReplicas)
	}
	if cfg.Store != "" && !strings.HasPrefix(cfg.Store, "postgres://") && !strings.HasPrefix(cfg.Store, "postgresql://") {
		return errors.New("fleetbench: -store: want a postgres:// URL")
	}
	if cfg.Changes < 3 {
		cfg.Changes = 3
	}
	if cfg.BurstBatch > adminapi.MaxCreateBatch {
		return fmt.Errorf("fleetbench: -burst-batch %d: want 1 to %d", cfg.BurstBatch, adminapi.MaxCreateBatch)
	}
	if cfg.ConnectLimit <= 0 {
		cfg.ConnectLimit = connectLimit
	}
	cfg.ConnectLimit = min(cfg.ConnectLimit, maxConnect)
	cfg.Changes = min(cfg.Changes, 3*cfg.N)
	if cfg.ChangeEvery < 0 || cfg.ChangeEvery > maxPaced/time.Duration(cfg.Changes) {
		return fmt.Errorf("fleetbench: -change-every %s: want 0 or more, %d changes within %s", cfg.ChangeEvery, cfg.Changes, maxPaced)
	}
	lim, err := RaiseOpenFiles()
	if err != nil {
		return err
	}
	if need := openFilesNeeded(cfg.N); lim < need {
		return fmt.Errorf("fleetbench: N=%d needs about %d open files in this process (and as many in the server), the limit is %d: raise the hard limit (ulimit -Hn)", cfg.N, need, lim)
	}
	fmt.Fprintf(cfg.Out, "fleetbench: N=%d, idle window %s, %d changes %s, burst %d workloads a call, open-file limit %d, hub flags %q\n", cfg.N, cfg.Window, cfg.Changes, pacing(cfg.ChangeEvery), max(cfg.BurstBatch, 1), lim, cfg.hubArgs())
	var targets []target
	dsn := cfg.Store
	if cfg.Replicas > 1 || dsn != "" {
		if dsn == "" {
			pg, stop, err := startPostgres()
			if err != nil {
				return fmt.Errorf("fleetbench: start a throwaway PostgreSQL: %w", err)
			}
			defer stop()
			dsn = pg
		}
		// Each target gets an empty schema of its own, dropped after the
		// run (the throwaway server goes whole).
		counts := []int{1}
		if cfg.Replicas > 1 {
			// One hub on the same store is the replicas' own baseline.
			counts = []int{cfg.Replicas, 1}
		}
		for _, n := range counts {
			name := fmt.Sprintf("fleetbench_%d_%d_r%d", os.Getpid(), time.Now().UnixNano(), n)
			sdsn, err := pgSchema(ctx, dsn, name)
			if err != nil {
				return fmt.Errorf("fleetbench: -store: %w", err)
			}
			if cfg.Store != "" {
				defer dropPGSchema(dsn, name)
			}
			targets = append(targets, newHubTarget(cfg.HubBin, filepath.Join(cfg.Dir, fmt.Sprintf("hub-pg-%d", n)), sdsn, n, cfg.hubArgs(), cfg.BurstBatch))
		}
	} else {
		targets = append(targets, newHubTarget(cfg.HubBin, filepath.Join(cfg.Dir, "hub"), "", 1, cfg.hubArgs(), cfg.BurstBatch))
	}
	parks := []bool{false}
	if cfg.Park {
		parks = append(parks, true)
	}
	for _, park := range parks {
		baseDir := filepath.Join(cfg.Dir, "baseline")
		if park {
			baseDir += "-parked"
		}
		if err := os.MkdirAll(baseDir, 0o700); err != nil {
			return err
		}
		targets = append(targets, newBaselineTarget(cfg.Self, baseDir, park))
	}
	var cols []column
	for _, t := range targets {
		r, err := measure(ctx, cfg, t)
		if err != nil {
			return fmt.Errorf("fleetbench: %s: %w (logs in %s)", t.name(), err, cfg.Dir)
		}
		cols = append(cols, column{t.name(), r})
	}
	printTable(cfg.Out, cfg.N, cols)
	return nil
}

// openFilesNeeded is the open files N agents need in one process: the
// bench holds one socket per agent, and so does the server, but each is
// its own process with its own limit (RLIMIT_NOFILE is per process;
// the server inherits the bench's raised soft limit).
func openFilesNeeded(n int) uint64 { return uint64(n + fdHeadroom) }

// http1Only reports whether t's agents must speak HTTP/1.1.
func http1Only(t target) bool {
	h, ok := t.(interface{ http1Only() bool })
	return ok && h.http1Only()
}

// column is one target's figures in the table.
type column struct {
	name string
	r    result
}

func measure(ctx context.Context, cfg Config, t target) (r result, err error) {
	fmt.Fprintf(cfg.Out, "== %s\n", t.name())
	if err := t.start(); err != nil {
		return r, err
	}
	defer func() { t.stop() }()
	urls := t.urls()
	r.replicas = len(urls)
	// replicaOf maps the URL an agent syncs with to its replica.
	replicaOf := map[string]int{}
	for i, u := range urls {
		pu, err := hubclient.ParseHubURL(u)
		if err != nil {
			return r, err
		}
		replicaOf[pu.String()] = i
	}
	var m meter
	creds, enrol, err := t.creds(ctx, cfg.N, &m)
	if err != nil {
		return r, err
	}
	if enrol > 0 {
		r.enrolPerSec = float64(cfg.N) / enrol.Seconds()
	}
	time.Sleep(settle)
	rss0, err := sumRSS(pids(t))
	if err != nil {
		return r, err
	}
	heap0, err := t.liveHeap(ctx)
	if err != nil {
		return r, err
	}
	f, err := newFleet(urls, creds, hubclient.HTTPSConfig{HTTP1: cfg.HTTP1 || http1Only(t), HTTP2: cfg.HTTP2 && !http1Only(t)})
	if err != nil {
		return r, err
	}
	f.m.dials.Store(0)
	defer f.stop()

	// Cold connect: every agent's first sync.
	start := time.Now()
	f.start()
	if n, ok := f.allSyncedSince(start, cfg.ConnectLimit); !ok {
		return r, fmt.Errorf("cold connect: %d of %d agents synced within %s", n, cfg.N, cfg.ConnectLimit)
	}
	r.cold = time.Since(start)
	r.coldDials = float64(f.m.dials.Load()) / float64(cfg.N)
	fmt.Fprintf(cfg.Out, "  cold connect %s, %.2f connections per agent; failed syncs: %s\n", r.cold.Round(time.Millisecond), r.coldDials, f.causes.take())
	if len(urls) > 1 {
		fmt.Fprintf(cfg.Out, "  agents per replica: %s\n", joinCounts(f.perReplica(urls)))
	}

	// Memory and idle cost, every agent connected and waiting; summed
	// over the processes.
	time.Sleep(settle)
	rss1, err := sumRSS(pids(t))
	if err != nil {
		return r, err
	}
	r.rssPerAgentKiB = float64(rss1-rss0) / float64(cfg.N)
	cpu0, err := sumCPU(pids(t))
	if err != nil {
		return r, err
	}
	b0, s0, lost0 := f.m.bytes.Load(), testnet.TCPOutSegs(), testnet.BacklogDrops()
	time.Sleep(cfg.Window)
	cpu1, err := sumCPU(pids(t))
	if err != nil {
		return r, err
	}
	rss2, err := sumRSS(pids(t))
	if err != nil {
		return r, err
	}
	r.rssEndPerAgentKiB = float64(rss2-rss0) / float64(cfg.N)
	// After the window's CPU is read: the collection it runs is not idle
	// cost.
	heap2, err := t.liveHeap(ctx)
	if err != nil {
		return r, err
	}
	r.heapEndPerAgentKiB = float64(heap2-heap0) / 1024 / float64(cfg.N)
	idleRate := float64(cpu1-cpu0) / cfg.Window.Seconds() // CPU per second of wall time
	hours := cfg.Window.Hours()
	r.idleCPUPerAgentHour = time.Duration(idleRate * 3600 / float64(cfg.N))
	tlsBytes := float64(f.m.bytes.Load() - b0)
	r.idleBytesPerAgentHour = tlsBytes / float64(cfg.N) / hours
	r.idleWirePerAgentHour = -1
	if s1 := testnet.TCPOutSegs(); s0 >= 0 && s1 >= 0 {
		// Every process on this host counts here too: a quiet host is
		// assumed.
		r.idleWirePerAgentHour = (tlsBytes + float64(s1-s0)*testnet.WireHeader) / float64(cfg.N) / hours
	}
	// Packets loopback lost to a full input backlog: the host's limit,
	// not the hub's. Bursts lose some; a connection cut for them shows
	// among the failed syncs.
	drops := int64(-1)
	if lost1 := testnet.BacklogDrops(); lost0 >= 0 && lost1 >= 0 {
		drops = lost1 - lost0
	}
	fmt.Fprintf(cfg.Out, "  idle: hub RSS +%.1f KiB per agent (+%.1f KiB at the window's end, live heap +%.1f KiB), CPU %s per agent-hour, %.1f KB per agent-hour (%.1f KB on the wire); failed syncs: %s; packets lost to loopback's backlog: %d\n",
		r.rssPerAgentKiB, r.rssEndPerAgentKiB, r.heapEndPerAgentKiB, r.idleCPUPerAgentHour.Round(time.Microsecond), r.idleBytesPerAgentHour/1000, r.idleWirePerAgentHour/1000, f.causes.take(), drops)

	// Single-workload changes, each waited for before the next. Among
	// replicas, a create goes to each replica in turn (the leader places
	// it); a park or run of a placed workload goes on alternate cycles to
	// another replica than the one holding its agent's poll, and to that
	// one: each wake is counted as crossing replicas or not by where the
	// agent was told.
	f.drainWakes()
	lat := make([]time.Duration, 0, cfg.Changes)
	began := make([]time.Duration, 0, cfg.Changes) // since the phase began
	var cross, same []time.Duration
	holder := 0 // the replica of the agent told of this cycle's workload
	cpu0, _ = sumCPU(pids(t))
	phase := time.Now()
	for k := range cfg.Changes {
		if err := waitTurn(ctx, phase, k, cfg.ChangeEvery); err != nil {
			return r, err
		}
		via := viaFor(k, holder, len(urls))
		t0 := time.Now()
		id, mode, err := t.change(ctx, k, via)
		if err != nil {
			return r, fmt.Errorf("change %d: %w", k, err)
		}
		w, err := f.waitWorkload(id, mode, changeLimit)
		if err != nil {
			return r, fmt.Errorf("change %d: %w", k, err)
		}
		d := w.at.Sub(t0)
		lat, began = append(lat, d), append(began, t0.Sub(phase))
		holder = replicaOf[w.url]
		if holder == via {
			same = append(same, d)
		} else {
			cross = append(cross, d)
		}
	}
	cpu1, _ = sumCPU(pids(t))
	// The idle cost during the phase is not the changes'.
	busy := float64(cpu1-cpu0) - idleRate*time.Since(phase).Seconds()
	r.cpuPerChange = time.Duration(max(busy, 0) / float64(cfg.Changes))
	r.wakeP50, r.wakeP99 = percentile(lat, 50), percentile(lat, 99)
	r.crossP50, r.crossP99, r.nCross = percentile(cross, 50), percentile(cross, 99), len(cross)
	r.sameP50, r.sameP99, r.nSame = percentile(same, 50), percentile(same, 99), len(same)
	fmt.Fprintf(cfg.Out, "  change: hub CPU %s each, wake p50 %s p99 %s; slowest %s (the phase began %s)\n", r.cpuPerChange.Round(10*time.Microsecond), r.wakeP50.Round(10*time.Microsecond), r.wakeP99.Round(10*time.Microsecond), slowest(lat, began, max(3, len(lat)/100+1)), phase.UTC().Format("15:04:05.000"))
	gcs := collections(t.procs())
	var quiet []time.Duration
	for k, d := range lat {
		if from := phase.Add(began[k]); !during(from, from.Add(d), gcs) {
			quiet = append(quiet, d)
		}
	}
	r.metGC, r.quietP99 = len(lat)-len(quiet), percentile(quiet, 99)
	fmt.Fprintf(cfg.Out, "  %d of the %d changes met a collection of the server; wake p99 of the others %s\n", r.metGC, len(lat), r.quietP99.Round(10*time.Microsecond))
	if len(urls) > 1 {
		fmt.Fprintf(cfg.Out, "  across replicas (%d): wake p50 %s p99 %s; on the agent's replica (%d): p50 %s p99 %s\n",
			r.nCross, r.crossP50.Round(10*time.Microsecond), r.crossP99.Round(10*time.Microsecond),
			r.nSame, r.sameP50.Round(10*time.Microsecond), r.sameP99.Round(10*time.Microsecond))
	}

	// A burst: a workload of its own for every machine.
	f.drainWakes()
	c := f.collect()
	start = time.Now()
	ids, err := t.burst(ctx, cfg.N)
	if err != nil {
		c.waitAll(nil, 0)
		return r, fmt.Errorf("burst: %w", err)
	}
	last, err := c.waitAll(ids, burstLimit)
	if err != nil {
		return r, fmt.Errorf("burst: %w", err)
	}
	r.burst = last.Sub(start)
	fmt.Fprintf(cfg.Out, "  burst of %d: the last agent had its own after %s\n", cfg.N, r.burst.Round(time.Millisecond))

	// kill -9 and restart of the process holding the most agents: every
	// agent that synced with it syncing again, with it or (failing over)
	// another replica. Agents sent away by a busy replica may have left
	// one with none, whose crash would measure nothing.
	time.Sleep(restartSettle)
	counts := f.perReplica(urls)
	victim := busiest(counts)
	hit := counts[victim]
	if len(urls) > 1 {
		fmt.Fprintf(cfg.Out, "  agents per replica: %s; replica %d crashes\n", joinCounts(counts), victim)
	}
	d0 := f.m.dials.Load()
	f.causes.take() // the restart's own, below
	start = time.Now()
	t.crash(victim)
	if err := t.restart(victim); err != nil {
		return r, fmt.Errorf("restart: %w", err)
	}
	if err := waitReached(ctx, t, start, cfg.N, cfg.ConnectLimit); err != nil {
		return r, fmt.Errorf("restart: %w", err)
	}
	r.restart = time.Since(start)
	r.restartDials = float64(f.m.dials.Load()-d0) / float64(max(hit, 1))
	r.errs = f.errs.Load()
	fmt.Fprintf(cfg.Out, "  kill -9 and restart: its %d agents synced again (all but %d of the %d) after %s, %.2f connections per agent; failed syncs: %s\n",
		hit, restartSlack(cfg.N), cfg.N, r.restart.Round(time.Millisecond), r.restartDials, f.causes.take())
	if len(urls) > 1 && cfg.Rebalance > 0 {
		fmt.Fprintf(cfg.Out, "  agents per replica just after the restart: %s\n", joinCounts(f.perReplica(urls)))
		time.Sleep(cfg.Rebalance)
		fmt.Fprintf(cfg.Out, "  agents per replica %s after the restart: %s; failed syncs: %s\n", cfg.Rebalance, joinCounts(f.perReplica(urls)), f.causes.take())
	}
	return r, nil
}

// viaFor is the replica whose admin API makes change k (create, park,
// run) of a run with n replicas, the workload's agent polling holder: a
// create goes to each replica in turn, a park or run to another replica
// than holder on even cycles and to holder on odd ones.
func viaFor(k, holder, n int) int {
	if k%3 == 0 {
		return (k / 3) % n
	}
	if (k/3)%2 == 0 {
		return (holder + 1) % n
	}
	return holder
}

// pids are the target's server processes.
func pids(t target) []int {
	var ps []int
	for _, p := range t.procs() {
		ps = append(ps, p.cmd.Process.Pid)
	}
	return ps
}

func sumCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, p := range pids {
		c, err := cpuTime(p)
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

func sumRSS(pids []int) (int64, error) {
	var sum int64
	for _, p := range pids {
		kb, err := rssKiB(p)
		if err != nil {
			return 0, err
		}
		sum += kb
	}
	return sum, nil
}

// waitReached waits until all but restartSlack(n) of n machines' syncs
// reached t since start.
func waitReached(ctx context.Context, t target, start time.Time, n int, limit time.Duration) error {
	want := n - restartSlack(n)
	end := time.Now().Add(limit)
	for {
		got, err := t.reached(ctx, start)
		if err == nil && got >= want {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(end) {
			return fmt.Errorf("%d of %d machines reached the server within %s, %d wanted (last error: %v)", got, n, limit, want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restartSlack is how many of n machines may still be missing when a
// restart counts as done: one in a thousand. The hub's sign is the polls
// it holds, and in steady state some are always between an answer and
// the next poll (10,000 agents poll about 450 times a second), so all n
// are rarely held at one instant.
func restartSlack(n int) int { return n / 1000 }

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f×", a/b)
}

// printTable prints one column per target and the ratios of the first to
// each of the others.
func printTable(w io.Writer, n int, cols []column) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }
	s := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	fmt.Fprintf(w, "\n| measure, N=%d |", n)
	for _, c := range cols {
		fmt.Fprintf(w, " %s |", c.name)
	}
	for _, c := range cols[1:] {
		if len(cols) == 2 {
			fmt.Fprint(w, " ratio |")
		} else {
			fmt.Fprintf(w, " ratio to %s |", c.name)
		}
	}
	fmt.Fprint(w, "\n|")
	for range 2 * len(cols) {
		fmt.Fprint(w, " --- |")
	}
	fmt.Fprintln(w)
	// row prints one measure: its text and value in each column; a
	// column whose ok is false shows a dash.
	row := func(name string, val func(r result) (string, float64, bool)) {
		fmt.Fprintf(w, "| %s |", name)
		for _, c := range cols {
			txt, _, ok := val(c.r)
			if !ok {
				txt = "—"
			}
			fmt.Fprintf(w, " %s |", txt)
		}
		_, f0, ok0 := val(cols[0].r)
		for _, c := range cols[1:] {
			_, f, ok := val(c.r)
			if !ok0 || !ok {
				fmt.Fprint(w, " — |")
				continue
			}
			fmt.Fprintf(w, " %s |", ratio(f0, f))
		}
		fmt.Fprintln(w)
	}
	dur := func(f func(d time.Duration) string, get func(r result) time.Duration) func(r result) (string, float64, bool) {
		return func(r result) (string, float64, bool) { d := get(r); return f(d), float64(d), true }
	}
	multi := false
	for _, c := range cols {
		multi = multi || c.r.replicas > 1
	}
	row("hub CPU per single-workload change (create, park, run)", dur(ms, func(r result) time.Duration { return r.cpuPerChange }))
	row("wake one agent after a change, p50", dur(ms, func(r result) time.Duration { return r.wakeP50 }))
	row("wake one agent after a change, p99", dur(ms, func(r result) time.Duration { return r.wakeP99 }))
	row("changes whose wake met a collection of the server (GODEBUG=gctrace=1)", func(r result) (string, float64, bool) {
		return fmt.Sprint(r.metGC), float64(r.metGC), true
	})
	row("wake p99 of the changes that met none", dur(ms, func(r result) time.Duration { return r.quietP99 }))
	if multi {
		// Across replicas: the change made on another replica than the
		// agent's; a single process has none, so its every wake is the
		// comparison.
		cross := func(get func(r result) time.Duration) func(r result) (string, float64, bool) {
			return func(r result) (string, float64, bool) {
				if r.replicas > 1 && r.nCross == 0 {
					return "", 0, false
				}
				if r.replicas < 2 {
					return ms(get(r)), float64(get(r)), true
				}
				return fmt.Sprintf("%s (%d)", ms(get(r)), r.nCross), float64(get(r)), true
			}
		}
		sameRep := func(get func(r result) time.Duration) func(r result) (string, float64, bool) {
			return func(r result) (string, float64, bool) {
				if r.replicas < 2 || r.nSame == 0 {
					return "", 0, false
				}
				return fmt.Sprintf("%s (%d)", ms(get(r)), r.nSame), float64(get(r)), true
			}
		}
		row("wake across replicas (change on another replica; one process: every change), p50", cross(func(r result) time.Duration {
			if r.replicas < 2 {
				return r.wakeP50
			}
			return r.crossP50
		}))
		row("wake across replicas (change on another replica; one process: every change), p99", cross(func(r result) time.Duration {
			if r.replicas < 2 {
				return r.wakeP99
			}
			return r.crossP99
		}))
		row("wake on the replica holding the poll, p50", sameRep(func(r result) time.Duration { return r.sameP50 }))
		row("wake on the replica holding the poll, p99", sameRep(func(r result) time.Duration { return r.sameP99 }))
	}
	row("one workload per machine in a burst: the last agent has its own", dur(s, func(r result) time.Duration { return r.burst }))
	row("hub RSS per idle connected agent", func(r result) (string, float64, bool) {
		return fmt.Sprintf("%.1f KiB", r.rssPerAgentKiB), r.rssPerAgentKiB, true
	})
	row("the same at the idle window's end", func(r result) (string, float64, bool) {
		return fmt.Sprintf("%.1f KiB", r.rssEndPerAgentKiB), r.rssEndPerAgentKiB, true
	})
	row("hub live heap per idle connected agent, after a collection at the window's end", func(r result) (string, float64, bool) {
		return fmt.Sprintf("%.1f KiB", r.heapEndPerAgentKiB), r.heapEndPerAgentKiB, true
	})
	row("idle traffic per agent-hour (TLS records, both ways)", func(r result) (string, float64, bool) {
		return fmt.Sprintf("%.1f KB", r.idleBytesPerAgentHour/1000), r.idleBytesPerAgentHour, true
	})
	row("idle traffic per agent-hour on the wire (with TCP/IP headers and keepalives)", func(r result) (string, float64, bool) {
		if r.idleWirePerAgentHour < 0 {
			return "—", 0, false
		}
		return fmt.Sprintf("%.1f KB", r.idleWirePerAgentHour/1000), r.idleWirePerAgentHour, true
	})
	row("hub CPU while idle, per agent-hour", func(r result) (string, float64, bool) {
		return fmt.Sprintf("%.4f core-s", r.idleCPUPerAgentHour.Seconds()), float64(r.idleCPUPerAgentHour), true
	})
	restart := "kill -9 and restart, all agents syncing again"
	if multi {
		restart = "kill -9 and restart (of replicas: the one holding the most agents; they fail over), its agents syncing again"
	}
	row(restart, dur(s, func(r result) time.Duration { return r.restart }))
	row("connections per agent in that restart", func(r result) (string, float64, bool) {
		return fmt.Sprintf("%.2f", r.restartDials), r.restartDials, true
	})
	row("cold connect of all enrolled agents", dur(s, func(r result) time.Duration { return r.cold }))
	row("connections per agent in that cold connect", func(r result) (string, float64, bool) {
		return fmt.Sprintf("%.2f", r.coldDials), r.coldDials, true
	})
	row("enrolments per second", func(r result) (string, float64, bool) {
		return fmt.Sprintf("%.0f", r.enrolPerSec), r.enrolPerSec, r.enrolPerSec > 0
	})
	fmt.Fprint(w, "\nfailed syncs retried:")
	for i, c := range cols {
		sep := ","
		if i == len(cols)-1 {
			sep = "\n"
		}
		fmt.Fprintf(w, " %s %d%s", c.name, c.r.errs, sep)
	}
}

// pacing says how the changes are started.
func pacing(every time.Duration) string {
	if every <= 0 {
		return "back to back"
	}
	return "every " + every.String()
}

// waitTurn waits until change k of a phase begun at phase is due, every
// apart (0: at once), or ctx is done.
func waitTurn(ctx context.Context, phase time.Time, k int, every time.Duration) error {
	wait := time.Until(phase.Add(time.Duration(k) * every))
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// slowest names the n slowest changes by their place in the phase, their
// kind (a create, park or run, in that order) and when each began after
// the phase did, for a p99 to be looked into beside the hub's log.
func slowest(lat, began []time.Duration, n int) string {
	idx := make([]int, len(lat))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(lat[b], lat[a]) })
	var parts []string
	for _, k := range idx[:min(n, len(idx))] {
		parts = append(parts, fmt.Sprintf("#%d %s %s at +%s", k, [3]string{"create", "park", "run"}[k%3], lat[k].Round(10*time.Microsecond), began[k].Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}
