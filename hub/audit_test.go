package hub

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/internal/syncbuf"
	"einsora.dev/edge/protocol"
)

// flakyStore makes the store's next Updates fail after fn ran whole, as a
// serialisation failure or a refused commit would: with retry, fn runs
// again (as PostgreSQL's store retries it); without, the write is lost.
type flakyStore struct {
	store.Store
	mu    sync.Mutex
	fails int
	retry bool
}

var errCommitRefused = errors.New("commit refused")

func (s *flakyStore) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	s.mu.Lock()
	fail := s.fails > 0
	if fail {
		s.fails--
	}
	s.mu.Unlock()
	if !fail {
		return s.Store.Update(ctx, fn)
	}
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errCommitRefused // rolls back what fn wrote
	})
	if !errors.Is(err, errCommitRefused) || !s.retry {
		return err
	}
	return s.Store.Update(ctx, fn)
}

var placedLine = regexp.MustCompile(`msg="admit: placed" .*workload=(\S+) machine=\S+ driver=\S+ attempt=(\d+) epoch=(\d+)`)

// The audit log is true: one "admit: placed" line per committed
// placement, with the epoch that committed it, whether the write was
// retried or refused (issue 18).
func TestAuditLogEqualsThePlacements(t *testing.T) {
	for _, retry := range []bool{true, false} {
		name := map[bool]string{true: "retried", false: "refused"}[retry]
		t.Run(name, func(t *testing.T) {
			st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			flaky := &flakyStore{Store: st, retry: retry}
			var log syncbuf.Buffer
			clk := clock.NewFake(epoch)
			hb, err := New(context.Background(), Config{Store: flaky, Clock: clk, AllowSim: true,
				Logger: slog.New(slog.NewTextHandler(io.MultiWriter(&log), nil))})
			if err != nil {
				t.Fatal(err)
			}
			h := &testHub{Hub: hb, t: t, clk: clk}
			h.machine("m-1")
			var ids []string
			for _, n := range []string{"a", "b", "c"} {
				ids = append(ids, h.create(n, protocol.KindContainer).ID)
			}
			if !h.ctl.lease(context.Background()) {
				t.Fatal("no lease")
			}
			if err := h.ctl.observe(context.Background()); err != nil {
				t.Fatal(err)
			}
			// Nothing is queued: the next Update is the batch of pending
			// workloads.
			h.ctl.admission.scanned = h.ctl.capGen.Load()
			flaky.mu.Lock()
			flaky.fails = 1
			flaky.mu.Unlock()
			err = h.ctl.admit(context.Background())
			if retry && err != nil {
				t.Fatal(err)
			}
			if !retry && !errors.Is(err, errCommitRefused) {
				t.Fatalf("pass: got %v, want the refused commit", err)
			}
			if !retry {
				h.pass() // places them for real, once
			}

			var placed []string
			for _, id := range ids {
				w := h.workload(id)
				if w.State != store.StateProvisioning {
					t.Fatalf("%s is %s, want provisioning", id, w.State)
				}
				placed = append(placed, w.ID+"/1/1")
			}
			var logged []string
			for _, m := range placedLine.FindAllStringSubmatch(log.String(), -1) {
				logged = append(logged, m[1]+"/"+m[2]+"/"+m[3])
			}
			slices.Sort(placed)
			slices.Sort(logged)
			if !slices.Equal(logged, placed) {
				t.Errorf("audit log: got %v, want the store's placements %v\n%s", logged, placed, log.String())
			}
		})
	}
}

// A write refused for a stale epoch logs no placement: the leader paused
// past its lease, another took it.
func TestAuditLogOfAStaleLeaderIsEmpty(t *testing.T) {
	var log syncbuf.Buffer
	h := newTestHub(t)
	h.log = slog.New(slog.NewTextHandler(&log, nil))
	h.ctl.log = h.log
	h.machine("m-1")
	w := h.create("a", protocol.KindContainer)
	if !h.ctl.lease(context.Background()) {
		t.Fatal("no lease")
	}
	err := h.st.Update(context.Background(), func(tx store.Tx) error {
		l, err := tx.Lease(h.ctl.leaseName())
		if err != nil {
			return err
		}
		l.Holder, l.Epoch = "another", l.Epoch+1
		return tx.PutLease(l)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ctl.pass(context.Background()); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("pass of a stale leader: got %v, want ErrNotLeader", err)
	}
	if got := h.workload(w.ID); got.State != store.StatePending {
		t.Errorf("a stale leader placed %s: %s", w.ID, got.State)
	}
	if m := placedLine.FindAllString(log.String(), -1); len(m) != 0 {
		t.Errorf("a stale leader logged placements: %v", m)
	}
}

// What fits nowhere is examined again only when capacity may have grown,
// not on every pass (issue 18).
func TestQueuedIsExaminedOnlyWhenCapacityChanges(t *testing.T) {
	h := newTestHub(t)
	ctx := context.Background()
	h.machine("m-1")
	if err := h.EnsureTenant(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	w, err := h.CreateWorkload(ctx, WorkloadSpec{Tenant: "busy", Name: "x", Kind: protocol.KindContainer, Class: "cpu-1", Region: "local", Image: "sim:"})
	if err != nil {
		t.Fatal(err)
	}
	h.pass()
	queued := h.workload(w.ID)
	if queued.State != store.StateQueued {
		t.Fatalf("%s is %s, want queued", w.ID, queued.State)
	}
	// A mark only an examination rewrites.
	mark := func() {
		t.Helper()
		err := h.st.Update(ctx, func(tx store.Tx) error {
			got, err := tx.Workload(w.ID)
			if err != nil {
				return err
			}
			got.Reason = "marked"
			return tx.PutWorkload(got)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	mark()
	h.pass()
	h.pass()
	if got := h.workload(w.ID); got.Reason != "marked" {
		t.Errorf("re-examined with no change of capacity: reason %q", got.Reason)
	}
	h.machine("m-2") // its first inventory is observed
	h.pass()
	if got := h.workload(w.ID); got.Reason != queued.Reason {
		t.Errorf("after a machine joined: reason %q, want %q", got.Reason, queued.Reason)
	}
}
