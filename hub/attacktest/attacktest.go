// Package attacktest holds the attacks of issue 14 on what agents can make
// the hub's store hold, as one suite run over every store (SQLite in
// package hub, PostgreSQL in hub/store/postgres). Each attack runs with
// small limits, so it takes seconds.
package attacktest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Run runs every attack against hubs over stores made by open; each
// subtest gets a new, empty store.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("made_up_statuses_are_not_stored", func(t *testing.T) { testStatusFlood(t, open(t)) })
	t.Run("stale_statuses_are_deleted", func(t *testing.T) { testStaleStatuses(t, open(t)) })
	t.Run("boot_id_changing_every_sync_is_bounded", func(t *testing.T) { testRebootFlood(t, open(t)) })
	t.Run("missing_agent_started_writes_nothing", func(t *testing.T) { testMissingAgentStarted(t, open(t)) })
	t.Run("timeline_keeps_its_newest_lines", func(t *testing.T) { testTimelineMax(t, open(t)) })
	t.Run("every_timeline_trimmed_by_the_leader", func(t *testing.T) { testLeaderTrims(t, open(t)) })
	t.Run("removed_workloads_timelines_are_retired", func(t *testing.T) { testRetention(t, open(t)) })
	t.Run("takeover_refused_until_replaced", func(t *testing.T) { testTakeover(t, open(t)) })
	t.Run("certificate_without_serial_replaced", func(t *testing.T) { testLegacyCertificate(t, open(t)) })
}

// Epoch is the fake clock's start in every attack.
var Epoch = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// Hub is a hub under attack, with its store and fake clock.
type Hub struct {
	*hub.Hub
	T     testing.TB
	Store store.Store
	Clock *clock.Fake
}

// New returns a hub over st with a fake clock; cfg's Store, Clock and
// Logger are set here.
func New(t testing.TB, st store.Store, cfg hub.Config) *Hub {
	t.Helper()
	clk := clock.NewFake(Epoch)
	if cfg.CA != nil {
		t.Fatal("attacktest.New: use NewEnrolling for a hub with a CA")
	}
	return newHub(t, st, cfg, clk)
}

// NewEnrolling returns a hub with a CA (in a temporary directory) on the
// same fake clock, and the tenant "acme".
func NewEnrolling(t testing.TB, st store.Store) *Hub {
	t.Helper()
	clk := clock.NewFake(Epoch)
	authority, err := ca.Open(ca.Options{Dir: t.TempDir(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	h := newHub(t, st, hub.Config{CA: authority}, clk)
	if err := h.CreateTenant(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	return h
}

func newHub(t testing.TB, st store.Store, cfg hub.Config, clk *clock.Fake) *Hub {
	t.Helper()
	// The attacking and the honest machines offer sim: what they run is
	// beside the point here.
	cfg.Store, cfg.Clock, cfg.AllowSim = st, clk, true
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h, err := hub.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Hub{Hub: h, T: t, Store: st, Clock: clk}
}

// Inventory is what every machine of the attacks reports.
func Inventory() *protocol.Inventory {
	return &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 32768, Drivers: []string{"sim"}}
}

// Machine registers machine id (tenant and region "local") and sends its
// first inventory.
func (h *Hub) Machine(id string) {
	h.T.Helper()
	ctx := context.Background()
	if err := h.EnsureTenant(ctx, "local"); err != nil {
		h.T.Fatal(err)
	}
	if err := h.RegisterMachine(ctx, id, id, "local", "local"); err != nil {
		h.T.Fatal(err)
	}
	h.Sync(id, &protocol.SyncRequest{Inventory: Inventory()})
}

// Sync makes a sync that the hub answers at once: naming no store, the
// agent is behind.
func (h *Hub) Sync(id string, req *protocol.SyncRequest) *protocol.SyncResponse {
	h.T.Helper()
	resp, err := h.TrySync(id, req)
	if err != nil {
		h.T.Fatalf("sync of %s: %v", id, err)
	}
	return resp
}

// TrySync is Sync that returns its error.
func (h *Hub) TrySync(id string, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
	req.ProtocolVersion = protocol.Version
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.Hub.Sync(ctx, id, req)
}

// Place creates a workload of class cpu-1 and runs a controller pass; it
// must land on machine.
func (h *Hub) Place(name, machine string) store.Workload {
	h.T.Helper()
	return h.PlaceClass(name, "cpu-1", machine)
}

// Whole is a class that fills a machine of Inventory.
const Whole = "whole"

// PlaceClass is Place with a class; Whole is created on first use.
func (h *Hub) PlaceClass(name, class, machine string) store.Workload {
	h.T.Helper()
	ctx := context.Background()
	if class == Whole {
		if err := h.CreateClass(ctx, store.Class{Name: Whole, Accelerator: "none", CPUs: Inventory().CPUs, MemoryMB: 1024}); err != nil && !errors.Is(err, store.ErrExists) {
			h.T.Fatal(err)
		}
	}
	w, err := h.CreateWorkload(ctx, hub.WorkloadSpec{Tenant: "local", Name: name, Kind: protocol.KindContainer, Class: class, Region: "local", Image: "sim:"})
	if err != nil {
		h.T.Fatal(err)
	}
	if err := h.Pass(ctx); err != nil {
		h.T.Fatal(err)
	}
	w, err = h.Workload(ctx, w.ID)
	if err != nil {
		h.T.Fatal(err)
	}
	if w.Machine != machine {
		h.T.Fatalf("workload %s placed on %q (%s, %s), want %s", name, w.Machine, w.State, w.Reason, machine)
	}
	return w
}

// Statuses returns what the store holds of machine's statuses.
func (h *Hub) Statuses(machine string) []store.StatusRecord {
	h.T.Helper()
	var out []store.StatusRecord
	err := h.Store.View(context.Background(), func(tx store.Tx) (err error) { out, err = tx.Statuses(machine); return err })
	if err != nil {
		h.T.Fatal(err)
	}
	return out
}

// Timeline returns a workload's timeline as the store holds it.
func (h *Hub) Timeline(id string) []store.TimelineEntry {
	h.T.Helper()
	var out []store.TimelineEntry
	err := h.Store.View(context.Background(), func(tx store.Tx) (err error) { out, err = tx.Timeline(id); return err })
	if err != nil {
		h.T.Fatal(err)
	}
	return out
}

// MadeUp returns n statuses of workload IDs no hub made.
func MadeUp(round, n int) []protocol.Status {
	out := make([]protocol.Status, n)
	for i := range out {
		out[i] = protocol.Status{Workload: fmt.Sprintf("fake-%d-%d", round, i), Attempt: 1, Mode: protocol.ModeRun, Code: protocol.CodeRunning}
	}
	return out
}

func running(w store.Workload, gen int64) protocol.Status {
	return protocol.Status{Workload: w.ID, Attempt: w.Attempt, Mode: protocol.ModeRun, Generation: gen, Code: protocol.CodeRunning}
}

// The attack: a machine reports thousands of made-up workload IDs (and
// one placed on another machine) within its rate limit. Its status rows
// stay what is placed on it, every made-up status is counted, and another
// machine's syncs keep working.
func testStatusFlood(t *testing.T, st store.Store) {
	h := New(t, st, hub.Config{})
	h.Machine("attacker")
	mine := h.PlaceClass("mine", Whole, "attacker")
	h.Machine("legit")
	theirs := h.Place("theirs", "legit")

	const rounds, per = 10, 500
	for r := range rounds {
		statuses := append(MadeUp(r, per), running(mine, 0), running(theirs, 0))
		h.Sync("attacker", &protocol.SyncRequest{Statuses: statuses})
		// The legitimate machine syncs between the attacker's reports.
		resp := h.Sync("legit", &protocol.SyncRequest{})
		h.Sync("legit", &protocol.SyncRequest{Generation: resp.Generation, AppliedGeneration: resp.Generation,
			Statuses: []protocol.Status{running(theirs, resp.Generation)}})
	}
	if got := h.Statuses("attacker"); len(got) != 1 || got[0].Workload != mine.ID {
		t.Errorf("the attacker's statuses: %d rows (%v…), want only that of its own workload", len(got), first(got))
	}
	if got := h.Statuses("legit"); len(got) != 1 || got[0].Workload != theirs.ID {
		t.Errorf("the legit machine's statuses: %v", got)
	}
	if got, want := h.Counters().DroppedStatuses, int64(rounds*(per+1)); got != want {
		t.Errorf("dropped statuses counted %d, want %d", got, want)
	}
	if err := h.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w, _ := h.Workload(context.Background(), theirs.ID); w.State != store.StateRunning {
		t.Errorf("the legit machine's workload is %s (%s), want running: its reports must still count", w.State, w.Reason)
	}
}

func first(s []store.StatusRecord) string {
	if len(s) == 0 {
		return "none"
	}
	return s[0].Workload
}

// Rows of workloads no longer placed on a machine (written before this
// bound, or of a workload since moved) go at its next report.
func testStaleStatuses(t *testing.T, st store.Store) {
	h := New(t, st, hub.Config{})
	h.Machine("m-1")
	mine := h.Place("mine", "m-1")
	err := st.Update(context.Background(), func(tx store.Tx) error {
		for _, id := range []string{"gone-1", "gone-2"} {
			if err := tx.PutStatus(store.StatusRecord{Machine: "m-1", At: Epoch, Status: protocol.Status{Workload: id, Code: protocol.CodeRunning}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h.Sync("m-1", &protocol.SyncRequest{Statuses: []protocol.Status{running(mine, 0)}})
	if got := h.Statuses("m-1"); len(got) != 1 || got[0].Workload != mine.ID {
		t.Errorf("statuses after a report: %v, want only %s", got, mine.ID)
	}
	if got := h.Counters().StaleStatuses; got != 2 {
		t.Errorf("stale statuses counted %d, want 2", got)
	}
}

func count(es []store.TimelineEntry, substr string) int {
	n := 0
	for _, e := range es {
		if strings.Contains(e.Text, substr) {
			n++
		}
	}
	return n
}

// The attack: a machine changes its boot ID on every sync. Each change is
// noted, but lines within 10 minutes of the first of their run collapse
// into one with a count, so an hour of syncs every 5 s writes a handful of
// lines, not 720.
func testRebootFlood(t *testing.T, st store.Store) {
	h := New(t, st, hub.Config{})
	h.Machine("m-1")
	w := h.Place("web", "m-1")
	before := len(h.Timeline(w.ID))
	const syncs = 720 // an hour, every 5 s
	for i := range syncs {
		h.Clock.Advance(5 * time.Second)
		h.Sync("m-1", &protocol.SyncRequest{BootID: fmt.Sprintf("boot-%d", i)})
	}
	es := h.Timeline(w.ID)
	added := len(es) - before
	// syncs-1 changes over an hour: one line per 10 minutes, and one more
	// where a run starts mid-window.
	if added < 6 || added > 7 {
		t.Fatalf("%d lines added by %d reboots in an hour, want 6 or 7: %v", added, syncs-1, es[before:])
	}
	if got := count(es, "rebooted"); got != added {
		t.Errorf("%d of %d added lines say rebooted", got, added)
	}
	last := es[len(es)-1]
	if !strings.Contains(last.Text, "rebooted") || !strings.Contains(last.Text, "(×") || !strings.Contains(last.Text, " min)") {
		t.Errorf("last line %q does not say how many reboots it stands for", last.Text)
	}
	total := 0
	for _, e := range es[before:] {
		total += max(e.Count, 1)
	}
	if total != syncs-1 {
		t.Errorf("the collapsed lines count %d reboots, want %d", total, syncs-1)
	}
	// The same boot ID again is no reboot.
	n := len(h.Timeline(w.ID))
	h.Clock.Advance(5 * time.Second)
	h.Sync("m-1", &protocol.SyncRequest{BootID: fmt.Sprintf("boot-%d", syncs-1)})
	h.Sync("m-1", &protocol.SyncRequest{})
	if got := len(h.Timeline(w.ID)); got != n {
		t.Errorf("an unchanged or missing boot ID added %d lines", got-n)
	}
}

// The attack: an agent that omits agent_started on every sync (after
// sending it once) is no restart, nor is one that sends the same value.
func testMissingAgentStarted(t *testing.T, st store.Store) {
	h := New(t, st, hub.Config{})
	h.Machine("m-1")
	w := h.Place("web", "m-1")
	started := Epoch.Add(-time.Hour)
	h.Sync("m-1", &protocol.SyncRequest{BootID: "b", AgentStarted: started})
	before := len(h.Timeline(w.ID))
	for i := range 100 {
		h.Clock.Advance(5 * time.Second)
		req := &protocol.SyncRequest{BootID: "b"}
		if i%2 == 0 {
			req.AgentStarted = started
		}
		h.Sync("m-1", req)
	}
	if got := h.Timeline(w.ID)[before:]; len(got) != 0 {
		t.Errorf("a missing or unchanged agent_started wrote %d lines: %v", len(got), got)
	}
	// A real restart is noted once.
	h.Sync("m-1", &protocol.SyncRequest{BootID: "b", AgentStarted: h.Clock.Now()})
	h.Sync("m-1", &protocol.SyncRequest{BootID: "b"})
	if got := count(h.Timeline(w.ID)[before:], "restarted"); got != 1 {
		t.Errorf("a restart noted %d times, want once", got)
	}
}

// Past TimelineMax the oldest lines go, and the top line says so once.
func testTimelineMax(t *testing.T, st store.Store) {
	const keep = 5
	h := New(t, st, hub.Config{TimelineMax: keep})
	h.Machine("m-1")
	w := h.Place("web", "m-1")
	for i := range 20 {
		// Reboots further apart than the collapse window each write a line.
		h.Clock.Advance(11 * time.Minute)
		h.Sync("m-1", &protocol.SyncRequest{BootID: fmt.Sprintf("boot-%d", i)})
	}
	es := h.Timeline(w.ID)
	if len(es) != keep {
		t.Fatalf("timeline holds %d lines, want %d", len(es), keep)
	}
	if !strings.Contains(es[0].Text, "older lines were dropped") || count(es, "older lines were dropped") != 1 {
		t.Errorf("top line %q: want one note that older lines went", es[0].Text)
	}
	if !strings.Contains(es[keep-1].Text, "rebooted") || !es[keep-1].At.Equal(h.Clock.Now()) {
		t.Errorf("newest line %+v: want the last reboot", es[keep-1])
	}
	if got := h.Counters().TimelineLinesDropped; got == 0 {
		t.Error("trimmed lines not counted")
	}
}

// Timelines the report path does not write to (a queued workload's, whose
// reason may change with every machine that comes and goes) are trimmed by
// the leader's retention pass.
func testLeaderTrims(t *testing.T, st store.Store) {
	const keep = 5
	ctx := context.Background()
	h := New(t, st, hub.Config{TimelineMax: keep})
	if err := h.EnsureTenant(ctx, "local"); err != nil {
		t.Fatal(err)
	}
	w, err := h.CreateWorkload(ctx, hub.WorkloadSpec{Tenant: "local", Name: "waits", Kind: protocol.KindContainer, Class: "cpu-1", Region: "local", Image: "sim:"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	err = st.Update(ctx, func(tx store.Tx) error {
		for i := range 20 {
			if err := tx.AddTimeline(store.TimelineEntry{Workload: w.ID, At: h.Clock.Now(), Text: fmt.Sprintf("queued: reason %d", i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(61 * time.Minute)
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	es := h.Timeline(w.ID)
	if len(es) != keep || !strings.Contains(es[0].Text, "older lines were dropped") || es[keep-1].Text != "queued: reason 19" {
		t.Errorf("after the leader's pass: %d lines, top %q, want %d with the note on top and the newest kept", len(es), first2(es), keep)
	}
}

func first2(es []store.TimelineEntry) string {
	if len(es) == 0 {
		return ""
	}
	return es[0].Text
}

// A removed workload's timeline outlives it by TimelineRetention, then goes
// at the leader's next retention pass; a live workload's stays.
func testRetention(t *testing.T, st store.Store) {
	ctx := context.Background()
	h := New(t, st, hub.Config{TimelineRetention: 2 * time.Hour})
	h.Machine("m-1")
	gone := h.Place("gone", "m-1")
	kept := h.Place("kept", "m-1")
	if err := h.DeleteWorkload(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	resp := h.Sync("m-1", &protocol.SyncRequest{})
	h.Sync("m-1", &protocol.SyncRequest{Generation: resp.Generation, AppliedGeneration: resp.Generation, Statuses: []protocol.Status{
		{Workload: gone.ID, Attempt: gone.Attempt, Mode: protocol.ModeRemove, Generation: resp.Generation, Code: protocol.CodeRemoved},
	}})
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Workload(ctx, gone.ID); err == nil {
		t.Fatal("the workload was not removed")
	}
	if len(h.Timeline(gone.ID)) == 0 {
		t.Fatal("the timeline went with the workload, before its retention")
	}
	h.Clock.Advance(90 * time.Minute)
	h.Sync("m-1", &protocol.SyncRequest{})
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(h.Timeline(gone.ID)) == 0 {
		t.Fatal("the timeline went before its retention passed")
	}
	h.Clock.Advance(time.Hour)
	h.Sync("m-1", &protocol.SyncRequest{})
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.Timeline(gone.ID); len(got) != 0 {
		t.Errorf("%d lines of a workload removed 2.5 h ago are kept, retention 2 h", len(got))
	}
	if len(h.Timeline(kept.ID)) == 0 {
		t.Error("a live workload's timeline went")
	}
	if h.Counters().TimelineLinesRetired == 0 {
		t.Error("retired lines not counted")
	}
}
