// Package fleetbench measures a hub with a fleet of simulated agents: each
// has its own certificate and loopback source address and syncs over real
// mutual TLS with the project's hubclient, all in this process, against a
// real einsora-hub serve process. Every figure is measured again against a
// stock Go TLS long-poll server in the same run, so ratios are measured,
// not remembered. docs/performance.md says how to run it and what it found.
package fleetbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Config configures a run.
type Config struct {
	// N is the number of simulated agents.
	N int
	// HubBin is the einsora-hub binary; Self is this program, started
	// again as the baseline server.
	HubBin, Self string
	// Window is how long idle CPU and traffic are measured: at least one
	// poll hold (25 s) for a fair count of polls.
	Window time.Duration
	// Changes is the number of single-workload changes measured.
	Changes int
	// HTTP1 makes the agents speak HTTP/1.1 instead of HTTP/2, to compare
	// the servers' cost per held poll.
	HTTP1 bool
	// Dir holds the hub's data and logs.
	Dir string
	Out io.Writer
}

// Limits that bound every wait of a run.
const (
	maxN          = 60000
	connectLimit  = 10 * time.Minute
	changeLimit   = 30 * time.Second
	burstLimit    = 10 * time.Minute
	settle        = 3 * time.Second
	restartSettle = 2 * time.Second
)

// result is one target's figures.
type result struct {
	enrolPerSec           float64
	cold                  time.Duration
	coldDials             float64
	rssPerAgentKiB        float64
	idleCPUPerAgentHour   time.Duration
	idleBytesPerAgentHour float64
	cpuPerChange          time.Duration
	wakeP50, wakeP99      time.Duration
	burst                 time.Duration
	restart               time.Duration
	restartDials          float64
	errs                  int64
}

// Run measures the hub, then the baseline, and prints the table.
func Run(ctx context.Context, cfg Config) error {
	if cfg.N < 1 || cfg.N > maxN {
		return fmt.Errorf("fleetbench: N=%d: want 1 to %d", cfg.N, maxN)
	}
	if cfg.Changes < 3 {
		cfg.Changes = 3
	}
	cfg.Changes = min(cfg.Changes, 3*cfg.N)
	lim, err := RaiseOpenFiles()
	if err != nil {
		return err
	}
	// Each agent holds one connection here and one in the server.
	if need := uint64(2*cfg.N + 256); lim < need {
		return fmt.Errorf("fleetbench: N=%d needs about %d open files, the limit is %d", cfg.N, need, lim)
	}
	hubDir, baseDir := filepath.Join(cfg.Dir, "hub"), filepath.Join(cfg.Dir, "baseline")
	for _, d := range []string{hubDir, baseDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	fmt.Fprintf(cfg.Out, "fleetbench: N=%d, idle window %s, %d changes, open-file limit %d\n", cfg.N, cfg.Window, cfg.Changes, lim)
	hub, err := measure(ctx, cfg, newHubTarget(cfg.HubBin, hubDir))
	if err != nil {
		return fmt.Errorf("fleetbench: hub: %w (its log: %s)", err, filepath.Join(hubDir, "hub.log"))
	}
	base, err := measure(ctx, cfg, newBaselineTarget(cfg.Self, baseDir))
	if err != nil {
		return fmt.Errorf("fleetbench: baseline: %w", err)
	}
	printTable(cfg.Out, cfg.N, hub, base)
	return nil
}

func measure(ctx context.Context, cfg Config, t target) (r result, err error) {
	fmt.Fprintf(cfg.Out, "== %s\n", t.name())
	if err := t.start(); err != nil {
		return r, err
	}
	defer func() { t.kill() }()
	var m meter
	creds, enrol, err := t.creds(ctx, cfg.N, &m)
	if err != nil {
		return r, err
	}
	if enrol > 0 {
		r.enrolPerSec = float64(cfg.N) / enrol.Seconds()
	}
	time.Sleep(settle)
	rss0, err := rssKiB(t.pid())
	if err != nil {
		return r, err
	}
	f, err := newFleet(t.url(), creds, cfg.HTTP1)
	if err != nil {
		return r, err
	}
	f.m.dials.Store(0)
	defer f.stop()

	// Cold connect: every agent's first sync.
	start := time.Now()
	f.start()
	if n, ok := f.allSyncedSince(start, connectLimit); !ok {
		return r, fmt.Errorf("cold connect: %d of %d agents synced within %s", n, cfg.N, connectLimit)
	}
	r.cold = time.Since(start)
	r.coldDials = float64(f.m.dials.Load()) / float64(cfg.N)
	fmt.Fprintf(cfg.Out, "  cold connect %s, %.2f connections per agent\n", r.cold.Round(time.Millisecond), r.coldDials)

	// Memory and idle cost, every agent connected and waiting.
	time.Sleep(settle)
	rss1, err := rssKiB(t.pid())
	if err != nil {
		return r, err
	}
	r.rssPerAgentKiB = float64(rss1-rss0) / float64(cfg.N)
	cpu0, err := cpuTime(t.pid())
	if err != nil {
		return r, err
	}
	b0 := f.m.bytes.Load()
	time.Sleep(cfg.Window)
	cpu1, err := cpuTime(t.pid())
	if err != nil {
		return r, err
	}
	idleRate := float64(cpu1-cpu0) / cfg.Window.Seconds() // CPU per second of wall time
	hours := cfg.Window.Hours()
	r.idleCPUPerAgentHour = time.Duration(idleRate * 3600 / float64(cfg.N))
	r.idleBytesPerAgentHour = float64(f.m.bytes.Load()-b0) / float64(cfg.N) / hours
	fmt.Fprintf(cfg.Out, "  idle: hub RSS +%.1f KiB per agent, CPU %s per agent-hour, %.1f KB per agent-hour\n",
		r.rssPerAgentKiB, r.idleCPUPerAgentHour.Round(time.Microsecond), r.idleBytesPerAgentHour/1000)

	// Single-workload changes, each waited for before the next.
	f.drainWakes()
	lat := make([]time.Duration, 0, cfg.Changes)
	cpu0, _ = cpuTime(t.pid())
	phase := time.Now()
	for k := range cfg.Changes {
		t0 := time.Now()
		id, mode, err := t.change(ctx, k)
		if err != nil {
			return r, fmt.Errorf("change %d: %w", k, err)
		}
		at, err := f.waitWorkload(id, mode, changeLimit)
		if err != nil {
			return r, fmt.Errorf("change %d: %w", k, err)
		}
		lat = append(lat, at.Sub(t0))
	}
	cpu1, _ = cpuTime(t.pid())
	// The idle cost during the phase is not the changes'.
	busy := float64(cpu1-cpu0) - idleRate*time.Since(phase).Seconds()
	r.cpuPerChange = time.Duration(max(busy, 0) / float64(cfg.Changes))
	r.wakeP50, r.wakeP99 = percentile(lat, 50), percentile(lat, 99)
	fmt.Fprintf(cfg.Out, "  change: hub CPU %s each, wake p50 %s p99 %s\n", r.cpuPerChange.Round(10*time.Microsecond), r.wakeP50.Round(10*time.Microsecond), r.wakeP99.Round(10*time.Microsecond))

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

	// kill -9 and restart: every agent syncing with the new process.
	time.Sleep(restartSettle)
	d0 := f.m.dials.Load()
	start = time.Now()
	t.kill()
	if err := t.start(); err != nil {
		return r, fmt.Errorf("restart: %w", err)
	}
	if err := waitReached(ctx, t, start, cfg.N); err != nil {
		return r, fmt.Errorf("restart: %w", err)
	}
	r.restart = time.Since(start)
	r.restartDials = float64(f.m.dials.Load()-d0) / float64(cfg.N)
	r.errs = f.errs.Load()
	fmt.Fprintf(cfg.Out, "  kill -9 and restart: all synced again after %s, %.2f connections per agent\n", r.restart.Round(time.Millisecond), r.restartDials)
	return r, nil
}

// waitReached waits until n machines' syncs reached t since start.
func waitReached(ctx context.Context, t target, start time.Time, n int) error {
	end := time.Now().Add(connectLimit)
	for {
		got, err := t.reached(ctx, start)
		if err == nil && got >= n {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("%d of %d machines reached the server within %s (last error: %v)", got, n, connectLimit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

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

func printTable(w io.Writer, n int, h, b result) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }
	s := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	fmt.Fprintf(w, "\n| measure, N=%d | einsora-hub serve | stock Go TLS long poll | ratio |\n| --- | --- | --- | --- |\n", n)
	row := func(name, hv, bv string, hf, bf float64) {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", name, hv, bv, ratio(hf, bf))
	}
	row("hub CPU per single-workload change (create, park, run)", ms(h.cpuPerChange), ms(b.cpuPerChange), float64(h.cpuPerChange), float64(b.cpuPerChange))
	row("wake one agent after a change, p50", ms(h.wakeP50), ms(b.wakeP50), float64(h.wakeP50), float64(b.wakeP50))
	row("wake one agent after a change, p99", ms(h.wakeP99), ms(b.wakeP99), float64(h.wakeP99), float64(b.wakeP99))
	row("one workload per machine in a burst: the last agent has its own", s(h.burst), s(b.burst), float64(h.burst), float64(b.burst))
	row("hub RSS per idle connected agent", fmt.Sprintf("%.1f KiB", h.rssPerAgentKiB), fmt.Sprintf("%.1f KiB", b.rssPerAgentKiB), h.rssPerAgentKiB, b.rssPerAgentKiB)
	row("idle traffic per agent-hour (TLS records, both ways)", fmt.Sprintf("%.1f KB", h.idleBytesPerAgentHour/1000), fmt.Sprintf("%.1f KB", b.idleBytesPerAgentHour/1000), h.idleBytesPerAgentHour, b.idleBytesPerAgentHour)
	row("hub CPU while idle, per agent-hour", fmt.Sprintf("%.4f core-s", h.idleCPUPerAgentHour.Seconds()), fmt.Sprintf("%.4f core-s", b.idleCPUPerAgentHour.Seconds()), float64(h.idleCPUPerAgentHour), float64(b.idleCPUPerAgentHour))
	row("kill -9 and restart, all agents syncing again", s(h.restart), s(b.restart), float64(h.restart), float64(b.restart))
	row("connections per agent in that restart", fmt.Sprintf("%.2f", h.restartDials), fmt.Sprintf("%.2f", b.restartDials), h.restartDials, b.restartDials)
	row("cold connect of all enrolled agents", s(h.cold), s(b.cold), float64(h.cold), float64(b.cold))
	row("connections per agent in that cold connect", fmt.Sprintf("%.2f", h.coldDials), fmt.Sprintf("%.2f", b.coldDials), h.coldDials, b.coldDials)
	fmt.Fprintf(w, "| enrolments per second | %.0f | — | — |\n", h.enrolPerSec)
	fmt.Fprintf(w, "\nfailed syncs retried: hub %d, baseline %d\n", h.errs, b.errs)
}
