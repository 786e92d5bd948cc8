package hub_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/attacktest"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

// BenchmarkAttacks runs the store-growth and timeline attacks of issue 14
// together against a hub on SQLite with 1,000 idle machines registered: an
// attacker at the per-machine rate limit (5 syncs a second) reports 4,096
// made-up workload IDs and a new boot ID on every sync, while a legitimate
// machine syncs 20 times a second. It prints the store's growth, the
// process's RSS, and the legitimate sync's p50/p99 beside a baseline run
// without the attack. EINSORA_ATTACK_SECONDS sets each phase's length
// (default 10).
//
//	go test -run '^$' -bench BenchmarkAttacks -benchtime 1x ./hub/
func BenchmarkAttacks(b *testing.B) {
	phase := 10 * time.Second
	if s, err := strconv.Atoi(os.Getenv("EINSORA_ATTACK_SECONDS")); err == nil && s > 0 {
		phase = time.Duration(s) * time.Second
	}
	for b.Loop() {
		runAttackBench(b, phase)
	}
}

func runAttackBench(b *testing.B, phase time.Duration) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "hub.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	// The real clock: reboots arrive as fast as the rate limit allows.
	h, err := hub.New(ctx, hub.Config{Store: st, Clock: clock.Real{}, Logger: quietLog(), AllowSim: true})
	if err != nil {
		b.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	sync1 := func(id string, req *protocol.SyncRequest) time.Duration {
		req.ProtocolVersion = protocol.Version
		start := time.Now()
		if _, err := h.Sync(ctx, id, req); err != nil {
			b.Fatalf("sync of %s: %v", id, err)
		}
		return time.Since(start)
	}
	must(h.EnsureTenant(ctx, "local"))
	register := func(id string) {
		must(h.RegisterMachine(ctx, id, id, "local", "local"))
		sync1(id, &protocol.SyncRequest{Inventory: attacktest.Inventory(), BootID: "b"})
	}
	// The attacker first, alone, so that the workloads whose timelines it
	// floods are placed on it: as many as its 8 CPUs hold.
	register("attacker")
	var mine []string
	for i := range attacktest.Inventory().CPUs {
		w, err := h.CreateWorkload(ctx, hub.WorkloadSpec{Tenant: "local", Name: fmt.Sprintf("w-%d", i), Kind: protocol.KindContainer, Class: "cpu-1", Region: "local", Image: "sim:"})
		must(err)
		mine = append(mine, w.ID)
	}
	// Settling holds admission for a while after the hub starts; pass
	// until everything is placed.
	for deadline := time.Now().Add(time.Minute); ; {
		must(h.Pass(ctx))
		ws, err := h.Workloads(ctx)
		must(err)
		if !slices.ContainsFunc(ws, func(w store.Workload) bool { return w.Machine != "attacker" }) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("workloads not placed on the attacker within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	register("legit")
	for i := range 1000 {
		register(fmt.Sprintf("idle-%04d", i))
	}

	legit := func(stop <-chan struct{}) []time.Duration {
		var out []time.Duration
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return out
			case <-t.C:
				out = append(out, sync1("legit", &protocol.SyncRequest{BootID: "b"}))
			}
		}
	}
	measure := func(attack bool) (lat []time.Duration, syncs int) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if attack {
			wg.Go(func() {
				t := time.NewTicker(200 * time.Millisecond) // the rate limit: 5 a second
				defer t.Stop()
				for round := 0; ; round++ {
					select {
					case <-stop:
						return
					case <-t.C:
						sync1("attacker", &protocol.SyncRequest{BootID: fmt.Sprintf("boot-%d", round), Statuses: attacktest.MadeUp(round, protocol.MaxStatuses)})
						syncs++
					}
				}
			})
		}
		go func() { time.Sleep(phase); close(stop) }()
		lat = legit(stop)
		wg.Wait()
		return lat, syncs
	}

	size0, rss0 := dbSize(path), rssBytes()
	base, _ := measure(false)
	size1, rss1 := dbSize(path), rssBytes()
	att, syncs := measure(true)
	size2, rss2 := dbSize(path), rssBytes()

	lines, last := 0, ""
	for _, id := range mine {
		es, err := h.Timeline(ctx, id)
		must(err)
		lines = max(lines, len(es))
		last = es[len(es)-1].Text
	}
	c := h.Counters()
	fmt.Fprintf(os.Stderr, "attacks over %s, 1000 idle machines, SQLite:\n", phase)
	fmt.Fprintf(os.Stderr, "  baseline: legit sync p50 %s p99 %s (%d syncs); hub.db %s %+d B; RSS %s -> %s\n",
		pct(base, 50), pct(base, 99), len(base), mb(size0), size1-size0, mb(rss0), mb(rss1))
	fmt.Fprintf(os.Stderr, "  attack:   legit sync p50 %s p99 %s (%d syncs); hub.db %s %+d B; RSS %s -> %s\n",
		pct(att, 50), pct(att, 99), len(att), mb(size1), size2-size1, mb(rss1), mb(rss2))
	fmt.Fprintf(os.Stderr, "  attacker: %d syncs, %d statuses dropped, none stored; longest timeline %d lines, the last: %q\n",
		syncs, c.DroppedStatuses, lines, last)
	b.ReportMetric(float64(pct(att, 99).Microseconds())/1000, "attack-p99-ms")
	b.ReportMetric(float64(pct(base, 99).Microseconds())/1000, "base-p99-ms")
	b.ReportMetric(float64(size2-size1)/1e6, "attack-db-growth-MB")
	b.ReportMetric(float64(lines), "timeline-lines")
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// dbSize is the bytes of the database and its write-ahead log.
func dbSize(path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// rssBytes is the process's resident set (Linux); -1 elsewhere.
func rssBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return -1
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
