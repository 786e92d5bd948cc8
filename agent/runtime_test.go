package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/sim"
	"einsora.dev/edge/protocol"
)

// flaky is a sim driver whose runtime can be switched off, as a Docker
// Engine that stops: Probe and every call then fail.
type flaky struct {
	*sim.Driver
	down atomic.Bool
}

func (f *flaky) Probe(ctx context.Context) error {
	if f.down.Load() {
		return fmt.Errorf("flaky: %w: the engine is stopped", drivers.ErrUnavailable)
	}
	return f.Driver.Probe(ctx)
}

func (f *flaky) List(ctx context.Context) ([]drivers.Instance, error) {
	if f.down.Load() {
		return nil, fmt.Errorf("flaky: %w", drivers.ErrUnavailable)
	}
	return f.Driver.List(ctx)
}

func withFlaky(fl **flaky) option {
	return func(c *Config) {
		d, _ := c.Drivers.Get(sim.Name)
		*fl = &flaky{Driver: d.(*sim.Driver)}
		c.Drivers = drivers.NewHost(*fl)
	}
}

// lastInventory is the last inventory the agent sent.
func (f *fakeHub) lastInventory() *protocol.Inventory {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.reqs) - 1; i >= 0; i-- {
		if inv := f.reqs[i].Inventory; inv != nil {
			return inv
		}
	}
	return nil
}

// waitStatus waits for a report of workload at generation gen and returns
// it.
func waitStatus(t *testing.T, f *fakeHub, workload string, gen int64, code protocol.Code) protocol.Status {
	t.Helper()
	var s protocol.Status
	waitFor(t, fmt.Sprintf("%s to report %s at generation %d", workload, code, gen), func() bool {
		var ok bool
		s, ok = f.status(workload)
		return ok && s.Generation == gen && s.Code == code
	})
	return s
}

// A runtime that stops answering is dropped from the offer on the next
// probe and its workloads are reported lost, whatever desired state asks,
// never stopped or removed; when it answers again it is offered again and
// the work goes on.
func TestRuntimeLostAndFoundOnReprobe(t *testing.T) {
	f := newFakeHub()
	var fl *flaky
	rec := &records{}
	h := startAgent(t, t.TempDir(), f, withFlaky(&fl), func(c *Config) { c.Logger = slog.New(rec) })
	f.set(run("w-1", 1))
	waitCode(t, f, "w-1", protocol.CodeRunning)
	if inv := f.lastInventory(); inv == nil || !slices.Equal(inv.Drivers, []string{"sim"}) {
		t.Fatalf("inventory %+v, want sim offered", inv)
	}

	fl.down.Store(true)
	h.agent.Reprobe()
	waitFor(t, "the inventory without the driver", func() bool {
		inv := f.lastInventory()
		return len(inv.Drivers) == 0 && len(inv.Notes) > 0 && strings.Contains(inv.Notes[len(inv.Notes)-1], "no runtime answers")
	})
	if h.agent.cfg.Drivers.IsOffered("sim") {
		t.Error("a driver that does not answer is still offered")
	}
	if attrs, ok := rec.find(slog.LevelWarn, "driver does not answer"); !ok || attrs["driver"] != "sim" {
		t.Errorf("no WARN naming the driver that stopped answering (%v)", attrs)
	}
	s := waitCode(t, f, "w-1", protocol.CodeLost)
	if !strings.Contains(s.Detail, "does not answer") {
		t.Errorf("lost detail %q does not say why", s.Detail)
	}
	// Asked to remove it while its runtime is away: still lost, and its
	// data kept, never reported removed.
	f.set(withMode(run("w-1", 1), protocol.ModeRemove))
	f.mu.Lock()
	gen := f.desired.Generation
	f.mu.Unlock()
	waitStatus(t, f, "w-1", gen, protocol.CodeLost)
	if _, err := os.Stat(h.sim.DataDir("w-1")); err != nil {
		t.Fatalf("data of a workload whose runtime went away: %v", err)
	}

	fl.down.Store(false)
	h.agent.Reprobe()
	waitFor(t, "the driver offered again", func() bool {
		inv := f.lastInventory()
		return slices.Equal(inv.Drivers, []string{"sim"}) && len(inv.Notes) == 0
	})
	waitStatus(t, f, "w-1", gen, protocol.CodeRemoved)
	if _, err := os.Stat(h.sim.DataDir("w-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data after the runtime came back and removed it: %v", err)
	}
}

// The inventory timer probes the drivers too, not only SIGHUP.
func TestInventoryTimerReprobesDrivers(t *testing.T) {
	clk := clock.NewFake(clock.Real{}.Now())
	f := newFakeHub()
	var fl *flaky
	fl0 := withFlaky(&fl)
	startAgent(t, t.TempDir(), f, func(c *Config) {
		fl0(c)
		c.InventoryInterval = time.Minute
		c.Clock = clk
	})
	waitFor(t, "the first inventory", func() bool { return f.lastInventory() != nil })
	fl.down.Store(true)
	waitFor(t, "the driver dropped after the timer", func() bool {
		clk.Advance(time.Minute)
		inv := f.lastInventory()
		return len(inv.Drivers) == 0
	})
}

// auto is every real runtime and never sim: an agent whose Docker does not
// answer offers nothing, says which runtime to start, and still syncs.
func TestAutoNeverOffersSim(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	dir := t.TempDir()
	host, closeAll, err := BuildDrivers(context.Background(), "auto", dir, "m-1", clock.Real{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if slices.Contains(host.Names(), sim.Name) || len(host.Names()) == 0 {
		t.Fatalf("auto made %v", host.Names())
	}
	f := newFakeHub()
	startAgent(t, dir, f, func(c *Config) { c.Drivers = host })
	waitFor(t, "a few syncs", func() bool { return f.syncs() >= 2 })
	inv := f.lastInventory()
	if inv == nil || len(inv.Drivers) != 0 {
		t.Fatalf("inventory %+v, want no driver offered", inv)
	}
	if !slices.ContainsFunc(inv.Notes, func(n string) bool { return strings.Contains(n, "start Docker") }) {
		t.Errorf("notes %q do not say to start Docker", inv.Notes)
	}
	f.set(run("w-1", 1))
	waitCode(t, f, "w-1", protocol.CodeRefusedDriverMissing)
}

// records keeps the log records a test looks at.
type records struct {
	mu  sync.Mutex
	got []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// find returns the attributes of the first record at level whose message
// contains msg.
func (r *records) find(level slog.Level, msg string) (map[string]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.got {
		if rec.Level == level && strings.Contains(rec.Message, msg) {
			attrs := map[string]string{}
			rec.Attrs(func(a slog.Attr) bool {
				attrs[a.Key] = a.Value.String()
				return true
			})
			return attrs, true
		}
	}
	return nil, false
}

func (r *records) count(level slog.Level, msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.got {
		if rec.Level == level && strings.Contains(rec.Message, msg) {
			n++
		}
	}
	return n
}

// A failed driver call is logged on the machine at WARN with the workload,
// the driver and the error, and `status` shows it as the last error.
func TestFailedDriverCallLoggedAndKeptForStatus(t *testing.T) {
	dir := t.TempDir()
	f := newFakeHub()
	rec := &records{}
	startAgent(t, dir, f, func(c *Config) { c.Logger = slog.New(rec) })
	w := run("w-1", 1)
	w.Image = "sim:color=blue"
	f.set(w)
	waitCode(t, f, "w-1", protocol.CodeFailedStart)
	attrs, ok := rec.find(slog.LevelWarn, "driver call failed")
	if !ok {
		t.Fatal("no WARN for the failed driver call")
	}
	if attrs["workload"] != "w-1" || attrs["driver"] != "sim" || attrs["op"] != "start" || !strings.Contains(attrs["err"], "unknown option") {
		t.Errorf("WARN attributes %v, want workload, driver, op and the error", attrs)
	}
	var st Status
	waitFor(t, "the last error in status", func() bool {
		var err error
		st, err = ReadStatus(dir)
		return err == nil && len(st.Workloads) == 1 && st.Workloads[0].LastError != nil
	})
	ws := st.Workloads[0]
	if ws.State != protocol.CodeFailedStart || ws.LastError.Driver != "sim" || ws.LastError.Op != "start" || !strings.Contains(ws.LastError.Error, "unknown option") {
		t.Errorf("status workload %+v, last error %+v", ws, *ws.LastError)
	}
}

// The last errors are bounded by the workloads the machine has: a workload
// that is neither reported nor held any more takes its error with it.
func TestLastErrorsForgottenWithTheirWorkload(t *testing.T) {
	dir := t.TempDir()
	f := newFakeHub()
	h := startAgent(t, dir, f)
	w := run("w-1", 1)
	w.Image = "sim:color=blue"
	f.set(w)
	waitCode(t, f, "w-1", protocol.CodeFailedStart)
	f.set(withMode(w, protocol.ModeRemove))
	waitCode(t, f, "w-1", protocol.CodeRemoved)
	f.set()
	waitFor(t, "w-1 gone from status", func() bool {
		st, err := ReadStatus(dir)
		return err == nil && len(st.Workloads) == 0
	})
	h.agent.mu.Lock()
	n := len(h.agent.lastErr)
	h.agent.mu.Unlock()
	if n != 0 {
		t.Errorf("%d last errors kept for workloads that are gone", n)
	}
}
