// Package storetest is the one test suite every store implementation
// passes.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Run runs the suite against stores made by open; each subtest gets a new,
// empty store.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("store_id_is_stable", func(t *testing.T) {
		s := open(t)
		if s.ID() == "" {
			t.Fatal("empty store id")
		}
	})
	t.Run("tenants", func(t *testing.T) { testTenants(t, open(t)) })
	t.Run("classes", func(t *testing.T) { testClasses(t, open(t)) })
	t.Run("machines_and_generations", func(t *testing.T) { testMachines(t, open(t)) })
	t.Run("machines_bumped_together", func(t *testing.T) { testBumpMachines(t, open(t)) })
	t.Run("machines_in_pages", func(t *testing.T) { testMachinePages(t, open(t)) })
	t.Run("workloads", func(t *testing.T) { testWorkloads(t, open(t)) })
	t.Run("workloads_written_together", func(t *testing.T) { testPutWorkloads(t, open(t)) })
	t.Run("workloads_listed_with_their_sizes", func(t *testing.T) { testListed(t, open(t)) })
	t.Run("workloads_in_pages", func(t *testing.T) { testWorkloadPages(t, open(t)) })
	t.Run("statuses", func(t *testing.T) { testStatuses(t, open(t)) })
	t.Run("timeline_in_order", func(t *testing.T) { testTimeline(t, open(t)) })
	t.Run("timeline_lines_of_one_transaction", func(t *testing.T) { testTimelineLinesOfOneTransaction(t, open(t)) })
	t.Run("failed_update_rolls_back", func(t *testing.T) { testRollback(t, open(t)) })
	t.Run("tokens_are_single_use", func(t *testing.T) { testTokens(t, open(t)) })
	t.Run("leases", func(t *testing.T) { testLeases(t, open(t)) })
	t.Run("stale_status_deleted", func(t *testing.T) { testDeleteStatus(t, open(t)) })
	t.Run("timeline_collapses_and_trims", func(t *testing.T) { testTimelineBounds(t, open(t)) })
	t.Run("removed_timelines_deleted", func(t *testing.T) { testRemovedTimelines(t, open(t)) })
	t.Run("certificates", func(t *testing.T) { testCertificates(t, open(t)) })
	t.Run("replicas", func(t *testing.T) { testReplicas(t, open(t)) })
}

func testReplicas(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error {
		for i, u := range []string{"https://b:1", "https://a:1", "https://c:1"} {
			if err := tx.PutReplica(store.Replica{URL: u, Seen: at.Add(time.Duration(i) * time.Second), Polls: i}); err != nil {
				return err
			}
		}
		// Seen again: moved, not added, with its new count.
		return tx.PutReplica(store.Replica{URL: "https://b:1", Seen: at.Add(5 * time.Second), Polls: 7})
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.Replicas(at.Add(2*time.Second), 10)
		if err != nil || len(got) != 2 || got[0].URL != "https://b:1" || !got[0].Seen.Equal(at.Add(5*time.Second)) || got[0].Polls != 7 || got[1].URL != "https://c:1" || got[1].Polls != 2 {
			t.Errorf("live replicas: got %+v, %v; want b then c", got, err)
		}
		if got, err := tx.Replicas(time.Time{}, 2); err != nil || len(got) != 2 || got[0].URL != "https://a:1" {
			t.Errorf("at most 2: got %+v, %v", got, err)
		}
		if all, err := tx.Replicas(time.Time{}, 10); err != nil || len(all) != 3 {
			t.Errorf("all: got %+v, %v; want 3", all, err)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		n, err := tx.PruneReplicas(at.Add(2 * time.Second))
		if err != nil || n != 1 {
			t.Errorf("pruned %d, %v; want 1 (a)", n, err)
		}
		return nil
	})
	view(t, s, func(tx store.Tx) error {
		if all, err := tx.Replicas(time.Time{}, 10); err != nil || len(all) != 2 {
			t.Errorf("after pruning: got %+v, %v; want 2", all, err)
		}
		return nil
	})
}

var at = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func update(t *testing.T, s store.Store, fn func(tx store.Tx) error) {
	t.Helper()
	if err := s.Update(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

func view(t *testing.T, s store.Store, fn func(tx store.Tx) error) {
	t.Helper()
	if err := s.View(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

func testTenants(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error { return tx.CreateTenant(store.Tenant{Name: "acme", Created: at}) })
	err := s.Update(context.Background(), func(tx store.Tx) error { return tx.CreateTenant(store.Tenant{Name: "acme", Created: at}) })
	if !errors.Is(err, store.ErrExists) {
		t.Errorf("second create: got %v, want ErrExists", err)
	}
	view(t, s, func(tx store.Tx) error {
		tn, err := tx.Tenant("acme")
		if err != nil || !tn.Created.Equal(at) {
			t.Errorf("got %+v, %v", tn, err)
		}
		if _, err := tx.Tenant("nobody"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("missing tenant: got %v, want ErrNotFound", err)
		}
		return nil
	})
}

func testClasses(t *testing.T, s store.Store) {
	c := store.Class{Name: "nvidia-1", Accelerator: "nvidia-gpu", Devices: 1, CPUs: 4, MemoryMB: 16384}
	update(t, s, func(tx store.Tx) error { return tx.PutClass(c) })
	c.CPUs = 8
	update(t, s, func(tx store.Tx) error { return tx.PutClass(c) })
	view(t, s, func(tx store.Tx) error {
		got, err := tx.Class("nvidia-1")
		if err != nil || got != c {
			t.Errorf("got %+v, %v; want %+v", got, err, c)
		}
		all, _ := tx.Classes()
		if len(all) != 1 {
			t.Errorf("got %d classes, want 1", len(all))
		}
		return nil
	})
}

func testMachines(t *testing.T, s store.Store) {
	inv := &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 16000, Drivers: []string{"sim"}}
	m := store.Machine{ID: "m-1", Name: "box", Owner: "acme", Region: "eu", OS: "linux", Arch: "amd64",
		LastSync: at, Inventory: inv, Registered: at}
	update(t, s, func(tx store.Tx) error { return tx.PutMachine(m) })
	var gen int64
	update(t, s, func(tx store.Tx) (err error) { gen, err = tx.BumpGeneration("m-1"); return err })
	if gen != 1 {
		t.Errorf("first bump: got %d, want 1", gen)
	}
	update(t, s, func(tx store.Tx) (err error) { gen, err = tx.BumpGeneration("m-1"); return err })
	if gen != 2 {
		t.Errorf("second bump: got %d, want 2", gen)
	}
	var bumped []store.Machine
	update(t, s, func(tx store.Tx) (err error) {
		bumped, err = tx.BumpMachines([]store.Bump{{Machine: "m-1", By: 1}, {Machine: "m-none", By: 1}})
		return err
	})
	if len(bumped) != 1 || bumped[0].Generation != 3 || bumped[0].Owner != "acme" || bumped[0].Region != "eu" || bumped[0].Inventory == nil || bumped[0].Inventory.CPUs != 8 {
		t.Errorf("BumpMachines of m-1 and a missing machine: got %+v, want m-1 at generation 3 with its record", bumped)
	}
	view(t, s, func(tx store.Tx) error {
		got, err := tx.Machine("m-1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Generation != 3 || got.Owner != "acme" || !got.LastSync.Equal(at) || got.Inventory == nil || got.Inventory.CPUs != 8 {
			t.Errorf("got %+v", got)
		}
		if _, err := tx.BumpGeneration("m-none"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("bump of a missing machine: got %v, want ErrNotFound", err)
		}
		if _, err := tx.BumpMachines([]store.Bump{{Machine: "m-1", By: 1}}); err == nil {
			t.Error("BumpMachines in a view: got no error")
		}
		if revoked, err := tx.MachineRevoked("m-1"); err != nil || revoked {
			t.Errorf("m-1 revoked: got %t, %v; want false", revoked, err)
		}
		if _, err := tx.MachineRevoked("m-none"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("revoked of a missing machine: got %v, want ErrNotFound", err)
		}
		if gen, revoked, err := tx.MachineGeneration("m-1"); err != nil || gen != 3 || revoked {
			t.Errorf("m-1 generation: got %d, revoked %t, %v; want 3, false", gen, revoked, err)
		}
		if _, _, err := tx.MachineGeneration("m-none"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("generation of a missing machine: got %v, want ErrNotFound", err)
		}
		return nil
	})
	revoked := store.Machine{ID: "m-9", Name: "gone", Owner: "acme", Region: "eu", Registered: at, Revoked: true}
	update(t, s, func(tx store.Tx) error { return tx.PutMachine(revoked) })
	view(t, s, func(tx store.Tx) error {
		if got, err := tx.MachineRevoked("m-9"); err != nil || !got {
			t.Errorf("m-9 revoked: got %t, %v; want true", got, err)
		}
		if _, got, err := tx.MachineGeneration("m-9"); err != nil || !got {
			t.Errorf("m-9 revoked by its generation's read: got %t, %v; want true", got, err)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.DeleteMachine("m-9") })
	other := store.Machine{ID: "m-0", Name: "elsewhere", Owner: "acme", Region: "us", LastSync: at.Add(time.Hour), Registered: at}
	silent := store.Machine{ID: "m-2", Name: "never synced", Owner: "acme", Region: "eu", Registered: at}
	gone := store.Machine{ID: "m-3", Name: "revoked", Owner: "acme", Region: "us", LastSync: at, Registered: at, Revoked: true, RevokedAt: at}
	update(t, s, func(tx store.Tx) error {
		return errors.Join(tx.PutMachine(other), tx.PutMachine(silent), tx.PutMachine(gone))
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.LastSyncs("eu")
		want := []store.LastSync{{Machine: "m-1", At: at}, {Machine: "m-2"}}
		if err != nil || len(got) != len(want) || got[0].Machine != want[0].Machine || !got[0].At.Equal(at) || got[1] != want[1] {
			t.Errorf("last syncs of eu: got %+v, %v; want %+v", got, err, want)
		}
		states, err := tx.MachineStates()
		wantStates := []store.MachineState{
			{Machine: "m-0", Region: "us", LastSync: at.Add(time.Hour)},
			{Machine: "m-1", Region: "eu", LastSync: at},
			{Machine: "m-2", Region: "eu"},
			{Machine: "m-3", Region: "us", LastSync: at, Revoked: true},
		}
		if err != nil || len(states) != len(wantStates) {
			t.Fatalf("machine states: got %+v, %v; want %+v", states, err, wantStates)
		}
		for i, w := range wantStates {
			g := states[i]
			if g.Machine != w.Machine || g.Region != w.Region || !g.LastSync.Equal(w.LastSync) || g.Revoked != w.Revoked {
				t.Errorf("machine state %d: got %+v, want %+v", i, g, w)
			}
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.DeleteMachine("m-3") })
	later := at.Add(time.Minute)
	update(t, s, func(tx store.Tx) error { return tx.TouchMachines([]string{"m-1", "m-none"}, later) })
	update(t, s, func(tx store.Tx) error { return tx.TouchMachines([]string{"m-1"}, at) }) // never back
	view(t, s, func(tx store.Tx) error {
		got, err := tx.Machine("m-1")
		if err != nil || !got.LastSync.Equal(later) || got.Generation != 3 {
			t.Errorf("touched: got %+v, %v; want last sync %v", got, err, later)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.DeleteMachine("m-1") })
	view(t, s, func(tx store.Tx) error {
		if _, err := tx.Machine("m-1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("deleted machine: got %v, want ErrNotFound", err)
		}
		return nil
	})
	if err := s.Update(context.Background(), func(tx store.Tx) error { return tx.DeleteMachine("m-1") }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting it again: got %v, want ErrNotFound", err)
	}
}

// testListed: a machine's workloads are listed oldest first, each with
// the fields its desired state reads and its class's size, zero where the
// class is gone; another machine's are not.
func testListed(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error {
		if err := tx.CreateTenant(store.Tenant{Name: "acme", Created: at}); err != nil {
			return err
		}
		for _, c := range []store.Class{{Name: "cpu-1", Accelerator: "none", CPUs: 1, MemoryMB: 512}, {Name: "cpu-2", Accelerator: "none", CPUs: 2, MemoryMB: 1024}} {
			if err := tx.PutClass(c); err != nil {
				return err
			}
		}
		for _, w := range []store.Workload{
			{ID: "w-b", Name: "b", Class: "cpu-2", Machine: "m-1", Created: at.Add(time.Second), State: store.StateRunning, Kind: protocol.KindContainer,
				Driver: "docker", Image: "web:1", Devices: []string{"nvidia:GPU-1"}, Attempt: 3, Spec: protocol.WorkloadSpec{Command: []string{"serve"}}},
			{ID: "w-a", Name: "a", Class: "gone", Machine: "m-1", Created: at, State: store.StateStopped, Kind: protocol.KindVM, Driver: "vz", Image: "img"},
			{ID: "w-c", Name: "c", Class: "cpu-1", Machine: "m-2", Created: at, State: store.StateRunning, Kind: protocol.KindContainer},
		} {
			w.Tenant, w.Region, w.Since = "acme", "eu", at
			if err := tx.CreateWorkload(w); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.Listed("m-1")
		want := []store.Listed{
			{ID: "w-a", Kind: protocol.KindVM, State: store.StateStopped, Driver: "vz", Image: "img", Class: "gone", Created: at},
			{ID: "w-b", Kind: protocol.KindContainer, State: store.StateRunning, Driver: "docker", Image: "web:1", Devices: []string{"nvidia:GPU-1"},
				Attempt: 3, Spec: protocol.WorkloadSpec{Command: []string{"serve"}}, Class: "cpu-2", Created: at.Add(time.Second), CPUs: 2, MemoryMB: 1024},
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("listed on m-1: got %+v, %v; want %+v", got, err, want)
		}
		if got, err := tx.Listed("m-3"); err != nil || len(got) != 0 {
			t.Errorf("listed on m-3, which holds none: got %+v, %v", got, err)
		}
		return nil
	})
}

func testWorkloads(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error { return tx.CreateTenant(store.Tenant{Name: "acme", Created: at}) })
	w := store.Workload{ID: "w-1", Name: "web", Tenant: "acme", Kind: protocol.KindContainer, Class: "cpu-1",
		Region: "eu", State: store.StatePending, Created: at, Since: at}
	w2 := w
	w2.ID, w2.Created, w2.State, w2.Machine, w2.Restarts = "w-2", at.Add(time.Second), store.StateRunning, "m-1", 2
	w2.Spec = protocol.WorkloadSpec{Command: []string{"serve", "--port", "8080"}, Env: map[string]string{"GREETING": "hi"},
		SecretEnv: map[string]string{"TOKEN": "v1:sealed"}, Ports: []protocol.Port{{Host: 8080, Container: 80, Proto: "tcp"}},
		Workdir: "/srv", Volumes: []protocol.Volume{{Name: "data", Path: "/data"}},
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, Max: 3}}
	update(t, s, func(tx store.Tx) error {
		if err := tx.CreateWorkload(w); err != nil {
			return err
		}
		return tx.CreateWorkload(w2)
	})
	if err := s.Update(context.Background(), func(tx store.Tx) error { return tx.CreateWorkload(w) }); !errors.Is(err, store.ErrExists) {
		t.Errorf("duplicate id: got %v, want ErrExists", err)
	}
	w.State, w.Machine, w.Driver, w.Devices, w.Attempt = store.StateProvisioning, "m-1", "sim", []string{"nvidia:GPU-1"}, 3
	update(t, s, func(tx store.Tx) error { return tx.PutWorkload(w) })
	view(t, s, func(tx store.Tx) error {
		got, err := tx.Workload("w-1")
		if err != nil || got.Attempt != 3 || !slices.Equal(got.Devices, w.Devices) || got.State != store.StateProvisioning {
			t.Errorf("got %+v, %v", got, err)
		}
		on, _ := tx.Workloads(store.WorkloadFilter{Machine: "m-1"})
		if len(on) != 2 || on[0].ID != "w-1" {
			t.Errorf("on m-1: got %d, want w-1 then w-2", len(on))
		}
		if ids, err := tx.WorkloadIDs("m-1"); err != nil || !slices.Equal(ids, []string{"w-1", "w-2"}) {
			t.Errorf("IDs on m-1: got %q, %v; want w-1 and w-2", ids, err)
		}
		if ids, err := tx.WorkloadIDs("m-2"); err != nil || len(ids) != 0 {
			t.Errorf("IDs on m-2, which holds none: got %q, %v", ids, err)
		}
		running, _ := tx.Workloads(store.WorkloadFilter{States: []store.State{store.StateRunning}})
		if len(running) != 1 || running[0].ID != "w-2" {
			t.Errorf("running: got %+v", running)
		} else if !reflect.DeepEqual(running[0].Spec, w2.Spec) || running[0].Restarts != 2 {
			t.Errorf("spec: got %+v, want %+v", running[0].Spec, w2.Spec)
		}
		if !reflect.DeepEqual(got.Spec, protocol.WorkloadSpec{}) {
			t.Errorf("w-1 has no spec, got %+v", got.Spec)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.DeleteWorkload("w-1") })
	view(t, s, func(tx store.Tx) error {
		if _, err := tx.Workload("w-1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after delete: got %v, want ErrNotFound", err)
		}
		return nil
	})
}

// testWorkloadPages pages through waiting workloads the way the controller
// does: by region, in (created, id) order, a page at a time, including
// workloads created in the same instant.
func testWorkloadPages(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error { return tx.CreateTenant(store.Tenant{Name: "acme", Created: at}) })
	var want []string
	update(t, s, func(tx store.Tx) error {
		for i := range 7 {
			w := store.Workload{ID: fmt.Sprintf("w-%d", 9-i), Tenant: "acme", Kind: protocol.KindContainer, Class: "cpu-1",
				Region: "eu", State: store.StateQueued, Created: at.Add(time.Duration(i/3) * time.Second), Since: at}
			if err := tx.CreateWorkload(w); err != nil {
				return err
			}
			other := w
			other.ID, other.Region = "us-"+w.ID, "us"
			if err := tx.CreateWorkload(other); err != nil {
				return err
			}
		}
		return nil
	})
	// Same instant: by ID. w-9, w-8, w-7 at +0s; w-6, w-5, w-4 at +1s; w-3 at +2s.
	want = []string{"w-7", "w-8", "w-9", "w-4", "w-5", "w-6", "w-3"}
	var got []string
	f := store.WorkloadFilter{States: []store.State{store.StateQueued}, Region: "eu", Limit: 2}
	for range 10 {
		var page []store.Workload
		view(t, s, func(tx store.Tx) (err error) { page, err = tx.Workloads(f); return err })
		if len(page) > 2 {
			t.Fatalf("a page of %d, limit 2", len(page))
		}
		for _, w := range page {
			got = append(got, w.ID)
		}
		if len(page) < 2 {
			break
		}
		last := page[len(page)-1]
		f.AfterCreated, f.AfterID = last.Created, last.ID
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged: got %v, want %v", got, want)
	}
}

func testStatuses(t *testing.T, s store.Store) {
	code := 3
	st := store.StatusRecord{Machine: "m-1", At: at, Status: protocol.Status{Workload: "w-1", Attempt: 2,
		Mode: protocol.ModeRun, Generation: 7, Code: protocol.CodeExited, ExitCode: &code, Detail: "bye"}}
	update(t, s, func(tx store.Tx) error { return tx.PutStatus(st) })
	st.Code, st.ExitCode, st.Restarts = protocol.CodeRunning, nil, 2
	update(t, s, func(tx store.Tx) error { return tx.PutStatus(st) })
	view(t, s, func(tx store.Tx) error {
		got, err := tx.Statuses("m-1")
		if err != nil || len(got) != 1 || got[0].Code != protocol.CodeRunning || got[0].ExitCode != nil || got[0].Generation != 7 ||
			got[0].Restarts != 2 {
			t.Errorf("got %+v, %v", got, err)
		}
		return nil
	})
}

func testTimeline(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error {
		for _, text := range []string{"one", "two", "three"} {
			if err := tx.AddTimeline(store.TimelineEntry{Workload: "w-1", At: at, Text: text}); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, s, func(tx store.Tx) error {
		es, _ := tx.Timeline("w-1")
		var texts []string
		for _, e := range es {
			texts = append(texts, e.Text)
		}
		if !slices.Equal(texts, []string{"one", "two", "three"}) {
			t.Errorf("got %v", texts)
		}
		return nil
	})
}

// testTimelineLinesOfOneTransaction adds many lines in one transaction,
// a store may write them together: each is there, in order, when the
// transaction reads or changes its timeline and after the commit; none
// is there after a rollback.
func testTimelineLinesOfOneTransaction(t *testing.T, s store.Store) {
	texts := func(es []store.TimelineEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Text)
		}
		return out
	}
	var want []string
	update(t, s, func(tx store.Tx) error {
		// 203 lines of w-1 across calls of one and of several, and
		// w-2's between them: more than any one write of lines.
		for i := range 200 {
			want = append(want, fmt.Sprint("line ", i))
			if err := tx.AddTimeline(store.TimelineEntry{Workload: "w-1", At: at, Text: want[i]}); err != nil {
				return err
			}
			if i%50 == 0 {
				if err := tx.AddTimeline(store.TimelineEntry{Workload: "w-2", At: at, Text: "other"}); err != nil {
					return err
				}
			}
		}
		last, err := tx.LastTimeline("w-1")
		if err != nil || last.Text != "line 199" {
			t.Errorf("last line in the transaction: got %q, %v, want line 199", last.Text, err)
		}
		more := []store.TimelineEntry{{Workload: "w-1", At: at, Text: "a"}, {Workload: "w-1", At: at, Text: "b"}, {Workload: "w-1", At: at, Text: "c"}}
		want = append(want, "a", "b", "c")
		if err := tx.AddTimeline(more...); err != nil {
			return err
		}
		es, err := tx.Timeline("w-1")
		if got := texts(es); err != nil || !slices.Equal(got, want) {
			t.Errorf("lines in the transaction: got %d (%v), want %d", len(got), err, len(want))
		}
		if err := tx.AddTimeline(store.TimelineEntry{Workload: "w-1", At: at, Text: "last"}); err != nil {
			return err
		}
		want = append(want, "last")
		return nil
	})
	boom := errors.New("boom")
	err := s.Update(context.Background(), func(tx store.Tx) error {
		if err := tx.AddTimeline(store.TimelineEntry{Workload: "w-1", At: at, Text: "rolled back"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
	view(t, s, func(tx store.Tx) error {
		es, err := tx.Timeline("w-1")
		if got := texts(es); err != nil || !slices.Equal(got, want) {
			t.Errorf("lines after the commit: got %d (%v), want %d, the last %q", len(got), err, len(want), want[len(want)-1])
		}
		es, err = tx.Timeline("w-2")
		if got := texts(es); err != nil || len(got) != 4 {
			t.Errorf("w-2's lines: got %v (%v), want 4", got, err)
		}
		return nil
	})
}

func testRollback(t *testing.T, s store.Store) {
	boom := errors.New("boom")
	err := s.Update(context.Background(), func(tx store.Tx) error {
		if err := tx.CreateTenant(store.Tenant{Name: "ghost", Created: at}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
	view(t, s, func(tx store.Tx) error {
		if _, err := tx.Tenant("ghost"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("rolled-back tenant: got %v, want ErrNotFound", err)
		}
		return nil
	})
}

func testTokens(t *testing.T, s store.Store) {
	tk := store.Token{Hash: "h1", Owner: "acme", Region: "eu", Created: at, Expires: at.Add(time.Hour)}
	update(t, s, func(tx store.Tx) error { return tx.CreateToken(tk) })
	var got store.Token
	update(t, s, func(tx store.Tx) (err error) { got, err = tx.UseToken("h1", at.Add(time.Minute)); return err })
	if got.Owner != "acme" || got.Region != "eu" || !got.Expires.Equal(tk.Expires) {
		t.Errorf("got %+v", got)
	}
	err := s.Update(context.Background(), func(tx store.Tx) error { _, err := tx.UseToken("h1", at); return err })
	if !errors.Is(err, store.ErrUsed) {
		t.Errorf("second use: got %v, want ErrUsed", err)
	}
	err = s.Update(context.Background(), func(tx store.Tx) error { _, err := tx.UseToken("nope", at); return err })
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown token: got %v, want ErrNotFound", err)
	}
	update(t, s, func(tx store.Tx) error {
		for i := range 3 {
			if err := tx.CreateToken(store.Token{Hash: fmt.Sprintf("n%d", i), Owner: "acme", Region: "us", Created: at.Add(time.Duration(i+1) * time.Second), Expires: at.Add(time.Hour)}); err != nil {
				return err
			}
		}
		return nil
	})
	var list []store.Token
	view(t, s, func(tx store.Tx) (err error) { list, err = tx.Tokens(3); return err })
	if len(list) != 3 || list[0].Hash != "n2" || list[2].Hash != "n0" || list[0].Region != "us" || !list[0].Used.IsZero() {
		t.Errorf("newest 3 tokens: %+v", list)
	}
	view(t, s, func(tx store.Tx) (err error) { list, err = tx.Tokens(10); return err })
	if len(list) != 4 || list[3].Hash != "h1" || list[3].Used.IsZero() {
		t.Errorf("all tokens, oldest (used) last: %+v", list)
	}
}

func testLeases(t *testing.T, s store.Store) {
	err := s.View(context.Background(), func(tx store.Tx) error { _, err := tx.Lease("controller:eu"); return err })
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("untaken lease: got %v, want ErrNotFound", err)
	}
	l := store.Lease{Name: "controller:eu", Holder: "hub-a", Epoch: 1, Expires: at}
	update(t, s, func(tx store.Tx) error { return tx.PutLease(l) })
	l.Holder, l.Epoch = "hub-b", 2
	update(t, s, func(tx store.Tx) error { return tx.PutLease(l) })
	view(t, s, func(tx store.Tx) error {
		got, err := tx.Lease("controller:eu")
		if err != nil || got.Holder != "hub-b" || got.Epoch != 2 || !got.Expires.Equal(at) {
			t.Errorf("got %+v, %v", got, err)
		}
		return nil
	})
}

func testMachinePages(t *testing.T, s store.Store) {
	// IDs whose byte order differs from a locale's: every dialect pages
	// in byte order.
	ids := []string{"m-B", "m-a", "m-10", "m-9", "m-_", "m-A"}
	update(t, s, func(tx store.Tx) error {
		for _, id := range ids {
			if err := tx.PutMachine(store.Machine{ID: id, Owner: "acme", Region: "eu", Registered: at}); err != nil {
				return err
			}
		}
		return nil
	})
	var got []string
	after := ""
	for range len(ids) + 1 {
		var page []store.Machine
		view(t, s, func(tx store.Tx) (err error) { page, err = tx.MachinesAfter(after, 4); return err })
		if len(page) > 4 {
			t.Fatalf("a page of 4 holds %d", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, m := range page {
			got = append(got, m.ID)
		}
		after = page[len(page)-1].ID
	}
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(got, want) {
		t.Errorf("paging by 4 gave %v, want %v", got, want)
	}
	var all []store.Machine
	view(t, s, func(tx store.Tx) (err error) { all, err = tx.Machines(); return err })
	if len(all) != len(ids) || all[0].ID != want[0] {
		t.Errorf("Machines() = %d machines from %s", len(all), all[0].ID)
	}
}

// ReplicaPolls is the count of polls the replica at url last published in
// st's registry, -1 for none, and -2 when it has no row: for the tests of
// the replicas evening out their agents.
func ReplicaPolls(t *testing.T, st store.Store, url string) int {
	t.Helper()
	n := -2
	if err := st.View(context.Background(), func(tx store.Tx) error {
		all, err := tx.Replicas(time.Time{}, 1<<10)
		for _, r := range all {
			if r.URL == url {
				n = r.Polls
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// testBumpMachines bumps machines several a statement: each by its own
// count, one named twice by both, each returning its own record.
func testBumpMachines(t *testing.T, s store.Store) {
	var bumps []store.Bump
	for i := range 100 {
		m := store.Machine{ID: fmt.Sprintf("m-%03d", i), Name: "box", Owner: fmt.Sprint("owner-", i), Region: "eu", Registered: at}
		update(t, s, func(tx store.Tx) error { return tx.PutMachine(m) })
		bumps = append(bumps, store.Bump{Machine: m.ID, By: int64(i%3 + 1)})
	}
	bumps = append(bumps, store.Bump{Machine: "m-007", By: 10}, store.Bump{Machine: "m-none", By: 1})
	var bumped []store.Machine
	update(t, s, func(tx store.Tx) (err error) { bumped, err = tx.BumpMachines(bumps); return err })
	if len(bumped) != 100 {
		t.Errorf("BumpMachines of 100 machines, one named twice and one missing: got %d records, want 100", len(bumped))
	}
	want := func(i int) int64 {
		if i == 7 {
			return 12
		}
		return int64(i%3 + 1)
	}
	for _, m := range bumped {
		var i int
		if _, err := fmt.Sscanf(m.ID, "m-%03d", &i); err != nil {
			t.Fatalf("BumpMachines returned %q", m.ID)
		}
		if m.Generation != want(i) || m.Owner != fmt.Sprint("owner-", i) {
			t.Errorf("BumpMachines returned %s at generation %d of %q, want %d of owner-%d", m.ID, m.Generation, m.Owner, want(i), i)
		}
	}
	view(t, s, func(tx store.Tx) error {
		for _, i := range []int{0, 7, 98} {
			if gen, _, err := tx.MachineGeneration(fmt.Sprintf("m-%03d", i)); err != nil || gen != want(i) {
				t.Errorf("m-%03d: got generation %d, %v; want %d", i, gen, err, want(i))
			}
		}
		return nil
	})
}

// testPutWorkloads writes workloads several a statement: every column of
// each, the last record of one named twice, and nothing of a write that
// names a missing one.
func testPutWorkloads(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error { return tx.CreateTenant(store.Tenant{Name: "acme", Created: at}) })
	var ws []store.Workload
	for i := range 100 {
		w := store.Workload{ID: fmt.Sprintf("w-%03d", i), Name: fmt.Sprint("web-", i), Tenant: "acme", Kind: protocol.KindContainer,
			Class: "cpu-1", Region: "eu", Image: "sim:", State: store.StatePending, Created: at.Add(time.Duration(i) * time.Second), Since: at}
		update(t, s, func(tx store.Tx) error { return tx.CreateWorkload(w) })
		ws = append(ws, w)
	}
	for i := range ws {
		w := &ws[i]
		w.Kind, w.Class, w.Region, w.Image = protocol.KindVM, "gpu-1", "us", fmt.Sprint("image-", i)
		w.State, w.Machine, w.Driver, w.Devices = store.StateProvisioning, fmt.Sprint("m-", i%7), "vz", []string{fmt.Sprint("apple-gpu:", i)}
		w.Attempt, w.ModeGeneration, w.Reason, w.Restarts = int64(i+1), int64(1000+i), fmt.Sprint("reason ", i), i%4
		w.Since, w.Progress = at.Add(time.Duration(i)*time.Minute), at.Add(time.Duration(i)*time.Hour)
		w.Spec = protocol.WorkloadSpec{Command: []string{"serve", fmt.Sprint(i)}, Env: map[string]string{"N": fmt.Sprint(i)}}
	}
	twice := ws[41]
	twice.Reason = "written first"
	update(t, s, func(tx store.Tx) error { return tx.PutWorkloads(append([]store.Workload{twice}, ws...)) })
	view(t, s, func(tx store.Tx) error {
		for _, w := range ws {
			got, err := tx.Workload(w.ID)
			if err != nil || !reflect.DeepEqual(got, w) {
				t.Errorf("PutWorkloads: %s got %+v, %v; want %+v", w.ID, got, err, w)
			}
		}
		return nil
	})
	missing := ws[3]
	missing.ID, missing.Reason = "w-none", "never written"
	changed := ws[2]
	changed.Reason = "rolled back"
	err := s.Update(context.Background(), func(tx store.Tx) error { return tx.PutWorkloads([]store.Workload{changed, missing}) })
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "w-none") {
		t.Errorf("PutWorkloads naming a missing workload: got %v, want ErrNotFound naming w-none", err)
	}
	view(t, s, func(tx store.Tx) error {
		if got, err := tx.Workload(changed.ID); err != nil || got.Reason != ws[2].Reason {
			t.Errorf("a failed PutWorkloads wrote %s: got reason %q, %v; want %q", changed.ID, got.Reason, err, ws[2].Reason)
		}
		return nil
	})
}
