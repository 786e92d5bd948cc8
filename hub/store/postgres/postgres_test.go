package postgres

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlstore"
	"einsora.dev/edge/hub/store/storetest"
)

func open(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, testDSN(t)) })
}

// Replicas that start at once on a new database all migrate it without an
// error and agree on its store ID.
func TestReplicasStartingAtOnce(t *testing.T) {
	dsn := testDSN(t)
	const n = 6
	stores := make([]*Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = Open(context.Background(), dsn) })
	}
	wg.Wait()
	for i, s := range stores {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		t.Cleanup(func() { s.Close() })
		if s.ID() != stores[0].ID() {
			t.Errorf("replica %d has store id %q, replica 0 %q", i, s.ID(), stores[0].ID())
		}
	}
}

// Two replicas on one database see each other's writes.
func TestReplicasSeeEachOther(t *testing.T) {
	dsn := testDSN(t)
	a, b := open(t, dsn), open(t, dsn)
	ctx := context.Background()
	if a.ID() != b.ID() {
		t.Errorf("store ids differ: %q, %q", a.ID(), b.ID())
	}
	must(t, a.Update(ctx, func(tx store.Tx) error {
		return tx.PutMachine(store.Machine{ID: "m-1", Name: "box", Owner: "acme", Region: "eu"})
	}))
	var gen int64
	must(t, b.Update(ctx, func(tx store.Tx) (err error) { gen, err = tx.BumpGeneration("m-1"); return err }))
	must(t, a.View(ctx, func(tx store.Tx) error {
		m, err := tx.Machine("m-1")
		if err == nil && (m.Generation != 1 || m.Name != "box") {
			t.Errorf("replica a reads %+v, want generation 1 set by b", m)
		}
		return err
	}))
	if gen != 1 {
		t.Errorf("bump on b: got %d, want 1", gen)
	}
	err := b.Update(ctx, func(tx store.Tx) error { return tx.CreateTenant(store.Tenant{Name: "acme"}) })
	must(t, err)
	err = a.Update(ctx, func(tx store.Tx) error { return tx.CreateTenant(store.Tenant{Name: "acme"}) })
	if !errors.Is(err, store.ErrExists) {
		t.Errorf("tenant made on b, made again on a: got %v, want ErrExists", err)
	}
}

// Lists sort by bytes, as on SQLite, whatever the database's collation.
func TestOrderIsByBytes(t *testing.T) {
	s := open(t, testDSN(t))
	ctx := context.Background()
	ids := []string{"b", "B", "a-2", "a1", "A"}
	must(t, s.Update(ctx, func(tx store.Tx) error {
		for _, id := range ids {
			if err := tx.PutMachine(store.Machine{ID: id}); err != nil {
				return err
			}
		}
		return nil
	}))
	must(t, s.View(ctx, func(tx store.Tx) error {
		ms, err := tx.Machines()
		var got []string
		for _, m := range ms {
			got = append(got, m.ID)
		}
		want := slices.Sorted(slices.Values(ids))
		if !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
		return err
	}))
}

// bumpAgainstAnother bumps m-1's generation in an Update on one replica
// that reads the row first; on the attempts conflict names, another replica
// commits a bump of the same row in between, so that attempt fails to
// serialise. wrap hides the failure behind an error of fn's own. It
// returns the attempts made, the generation the last one bumped to, and
// Update's error.
func bumpAgainstAnother(t *testing.T, conflict func(attempt int) bool, wrap bool) (attempts int, gen int64, err error) {
	t.Helper()
	dsn := testDSN(t)
	a, b := open(t, dsn), open(t, dsn)
	ctx := context.Background()
	must(t, a.Update(ctx, func(tx store.Tx) error { return tx.PutMachine(store.Machine{ID: "m-1"}) }))
	err = a.Update(ctx, func(tx store.Tx) error {
		attempts++
		if _, err := tx.Machine("m-1"); err != nil {
			return err
		}
		if conflict(attempts) {
			must(t, b.Update(ctx, func(tx store.Tx) error { _, err := tx.BumpGeneration("m-1"); return err }))
		}
		var err error
		if gen, err = tx.BumpGeneration("m-1"); err != nil && wrap {
			return errors.New("could not bump")
		}
		return err
	})
	return attempts, gen, err
}

// A transaction whose read another replica's commit made stale fails to
// serialise, and Update runs it again, which then succeeds.
func TestSerializationFailureIsRetried(t *testing.T) {
	attempts, gen, err := bumpAgainstAnother(t, func(attempt int) bool { return attempt == 1 }, false)
	must(t, err)
	if attempts != 2 || gen != 2 {
		t.Errorf("got %d attempts and generation %d, want 2 and 2", attempts, gen)
	}
}

// A transaction that conflicts on every attempt is given up after
// sqlstore.MaxAttempts and said to be contended, so the caller can make it
// smaller.
func TestConflictPastTheRetriesIsContended(t *testing.T) {
	attempts, _, err := bumpAgainstAnother(t, func(int) bool { return true }, false)
	if !errors.Is(err, store.ErrContended) || attempts != sqlstore.MaxAttempts {
		t.Errorf("got %v after %d attempts, want store.ErrContended after %d", err, attempts, sqlstore.MaxAttempts)
	}
}

// fn is retried even when it hides the serialisation failure behind an
// error of its own.
func TestRetryWhenFnReplacesTheError(t *testing.T) {
	attempts, _, err := bumpAgainstAnother(t, func(attempt int) bool { return attempt == 1 }, true)
	if err != nil || attempts != 2 {
		t.Errorf("got %v after %d attempts, want success after 2", err, attempts)
	}
}

// Two replicas bumping one machine's generation at once: every conflict
// is retried and no bump is lost.
func TestConcurrentBumpsAllLand(t *testing.T) {
	dsn := testDSN(t)
	a, b := open(t, dsn), open(t, dsn)
	ctx := context.Background()
	must(t, a.Update(ctx, func(tx store.Tx) error { return tx.PutMachine(store.Machine{ID: "m-1"}) }))
	const each = 50
	var calls atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for _, s := range []*Store{a, b} {
		wg.Go(func() {
			for range each {
				errs <- s.Update(ctx, func(tx store.Tx) error {
					calls.Add(1)
					m, err := tx.Machine("m-1")
					if err != nil {
						return err
					}
					m.LastSync = time.Unix(0, m.Generation+1)
					if err := tx.PutMachine(m); err != nil {
						return err
					}
					_, err = tx.BumpGeneration("m-1")
					return err
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	must(t, a.View(ctx, func(tx store.Tx) error {
		m, err := tx.Machine("m-1")
		if err == nil && m.Generation != 2*each {
			t.Errorf("final generation %d, want %d", m.Generation, 2*each)
		}
		return err
	}))
	t.Logf("%d bumps took %d runs of fn", 2*each, calls.Load())
}

// wakes collects Listen's calls of wake.
type wakes struct{ c chan string }

func newWakes() *wakes          { return &wakes{c: make(chan string, 100)} }
func (w *wakes) wake(id string) { w.c <- id }
func (w *wakes) want(t *testing.T, id string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-w.c:
			if got == id {
				return
			}
			// Other notifications on a shared server are not this test's.
		case <-deadline:
			t.Fatalf("no wake(%q) within 10s", id)
		}
	}
}

// listen runs s.Listen until the test ends and returns the PIDs of its
// listening connections as they come.
func listen(t *testing.T, s *Store, w *wakes) <-chan uint32 {
	pids := make(chan uint32, 10)
	s.onListen = func(pid uint32) { pids <- pid }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Listen(ctx, w.wake) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Listen: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Listen did not return when its context ended")
		}
	})
	return pids
}

func nextPID(t *testing.T, pids <-chan uint32) uint32 {
	t.Helper()
	select {
	case pid := <-pids:
		return pid
	case <-time.After(30 * time.Second):
		t.Fatal("Listen did not start listening within 30s")
		return 0
	}
}

// A replica's Notify wakes the machine on another replica's Listen.
func TestNotifyWakesOtherReplica(t *testing.T) {
	dsn := testDSN(t)
	a, b := open(t, dsn), open(t, dsn)
	w := newWakes()
	nextPID(t, listen(t, a, w))
	ctx := context.Background()
	must(t, b.Notify(ctx, "m-1"))
	w.want(t, "m-1")
	must(t, a.Notify(ctx, "m-2"))
	w.want(t, "m-2")
}

// When its connection is killed, Listen reconnects, wakes everything once
// (it may have missed notifications), and delivers later ones.
func TestListenReconnects(t *testing.T) {
	dsn := testDSN(t)
	a, b := open(t, dsn), open(t, dsn)
	w := newWakes()
	pids := listen(t, a, w)
	pid := nextPID(t, pids)
	w.want(t, "") // the first LISTEN's: polls taken before it was up
	ctx := context.Background()
	var killed bool
	must(t, b.db.QueryRowContext(ctx, `SELECT pg_terminate_backend($1)`, int64(pid)).Scan(&killed))
	if !killed {
		t.Fatalf("backend %d not terminated", pid)
	}
	if again := nextPID(t, pids); again == pid {
		t.Errorf("listening again on backend %d, the terminated one", again)
	}
	w.want(t, "")
	must(t, b.Notify(ctx, "m-3"))
	w.want(t, "m-3")
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
