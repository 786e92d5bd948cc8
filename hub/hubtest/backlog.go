// Package hubtest holds scenarios run against every store: the hub's tests
// run them on SQLite and PostgreSQL's on PostgreSQL.
package hubtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Backlog puts n workloads that fit nowhere in st's queue (a tenant with
// no machine), directly and in batches, starts a hub on it, and then
// creates one workload that fits: it must be placed within a few seconds,
// with at most one change of leader, and the backlog must still be
// examined to the end. It logs the figures.
func Backlog(t *testing.T, st store.Store, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := hub.New(ctx, hub.Config{AllowSim: true, Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PollTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"local", "busy"} {
		if err := h.EnsureTenant(ctx, tenant); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.RegisterMachine(ctx, "m-1", "m-1", "local", "local"); err != nil {
		t.Fatal(err)
	}
	inv := &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 32768, Drivers: []string{"sim"}}
	if _, err := h.Sync(ctx, "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, Inventory: inv}); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	const stale = "waiting since before the hub restarted"
	created := time.Now().Add(-time.Hour)
	for i := 0; i < n; {
		err := st.Update(ctx, func(tx store.Tx) error {
			for j := i; j < min(n, i+5000); j++ {
				err := tx.CreateWorkload(store.Workload{ID: fmt.Sprintf("w-%07d", j), Name: "backlog", Tenant: "busy",
					Kind: protocol.KindContainer, Class: "cpu-1", Region: "local", State: store.StateQueued,
					Reason: stale, Created: created, Since: created})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		i += 5000
	}
	t.Logf("inserted %d waiting workloads in %v", n, time.Since(began).Round(time.Millisecond))

	runDone := make(chan error, 1)
	go func() { runDone <- h.Run(ctx) }()
	defer func() { cancel(); <-runDone }()
	first := leaderEpoch(t, h, st)

	start := time.Now()
	w, err := h.CreateWorkload(ctx, hub.WorkloadSpec{Tenant: "local", Name: "web", Kind: protocol.KindContainer, Class: "cpu-1", Region: "local"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		got, err := h.Workload(ctx, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == store.StateProvisioning {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("behind %d waiting workloads, one that fits is still %s after %v: %s", n, got.State, time.Since(start), got.Reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("placed one that fits behind %d waiting in %v", n, time.Since(start).Round(time.Millisecond))

	// The backlog is examined to its end, oldest first: the last one gets
	// the reason of now.
	lastID := fmt.Sprintf("w-%07d", n-1)
	for {
		got, err := h.Workload(ctx, lastID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Reason != stale {
			break
		}
		if time.Since(began) > 10*time.Minute {
			t.Fatalf("the last of %d waiting workloads was never examined", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	d := time.Since(start)
	t.Logf("examined %d waiting workloads in %v: %.0f a second", n, d.Round(time.Millisecond), float64(n)/d.Seconds())
	if last := leaderEpoch(t, h, st); last-first > 1 {
		t.Errorf("leadership changed %d times while the backlog drained (epoch %d to %d), want at most 1", last-first, first, last)
	}
}

// leaderEpoch waits for h to lead and returns the lease's epoch.
func leaderEpoch(t *testing.T, h *hub.Hub, st store.Store) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if leading, _ := h.Leadership(); leading {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hub never took the region's lease")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var l store.Lease
	err := st.View(context.Background(), func(tx store.Tx) (err error) { l, err = tx.Lease("controller:local"); return err })
	if err != nil {
		t.Fatal(err)
	}
	return l.Epoch
}
