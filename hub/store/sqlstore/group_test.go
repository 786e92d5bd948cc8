package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
)

// heldUpdate starts an Update that holds the writer until release is
// closed, and returns once it holds it, so that Updates after it queue.
func heldUpdate(t *testing.T, s *Store, release chan struct{}) (wait func()) {
	t.Helper()
	held := make(chan struct{})
	var done sync.WaitGroup
	done.Go(func() {
		err := s.Update(context.Background(), func(tx store.Tx) error {
			close(held)
			<-release
			return tx.PutMachine(groupMachine("held"))
		})
		if err != nil {
			t.Errorf("held update: %v", err)
		}
	})
	<-held
	return done.Wait
}

func groupMachine(id string) store.Machine {
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	return store.Machine{ID: id, Name: id, Owner: "acme", Region: "eu", LastSync: at, Registered: at}
}

// waitWaiting waits until n Updates wait for a group.
func waitWaiting(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.group.Waiting() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d updates waiting, want %d", s.group.Waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func machineExists(t *testing.T, s *Store, id string) bool {
	t.Helper()
	err := s.View(context.Background(), func(tx store.Tx) error { _, err := tx.Machine(id); return err })
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// Issue 13: a commit is most of a small write's cost on SQLite. The
// Updates that arrive while one commits share the next transaction.
func TestUpdatesArrivingTogetherShareACommit(t *testing.T) {
	s := openSQLite(t)
	var commits atomic.Int64
	s.OnCommit(func() { commits.Add(1) })
	release := make(chan struct{})
	waitHeld := heldUpdate(t, s, release)
	const n = 10
	var updates sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		updates.Go(func() {
			errs[i] = s.Update(context.Background(), func(tx store.Tx) error { return tx.PutMachine(groupMachine(fmt.Sprint("m-", i))) })
		})
	}
	waitWaiting(t, s, n)
	close(release)
	updates.Wait()
	waitHeld()
	for i, err := range errs {
		if err != nil {
			t.Errorf("update %d: %v", i, err)
		}
		if !machineExists(t, s, fmt.Sprint("m-", i)) {
			t.Errorf("m-%d was not written", i)
		}
	}
	if got := commits.Load(); got != 2 {
		t.Errorf("%d updates took %d commits, want 2: the held one, then the rest together", n+1, got)
	}
}

// Each Update of a group still fails alone: its writes and timeline lines
// are undone and the others' kept; one whose context ended while it
// waited does not run; one that panics panics in its own caller.
func TestAnUpdateInAGroupFailsAlone(t *testing.T) {
	s := openSQLite(t)
	release := make(chan struct{})
	waitHeld := heldUpdate(t, s, release)
	line := func(id string) store.TimelineEntry {
		return store.TimelineEntry{Workload: "w-" + id, At: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC), Text: "line of " + id}
	}
	write := func(id string) func(store.Tx) error {
		return func(tx store.Tx) error {
			if err := tx.PutMachine(groupMachine(id)); err != nil {
				return err
			}
			return tx.AddTimeline(line(id))
		}
	}
	refused := errors.New("refused")
	cancelled, cancel := context.WithCancel(context.Background())
	var ranCancelled atomic.Bool
	var panicked atomic.Value
	var updates sync.WaitGroup
	errs := map[string]error{}
	var mu sync.Mutex
	do := func(name string, ctx context.Context, fn func(store.Tx) error) {
		updates.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					panicked.Store(fmt.Sprint(r))
				}
			}()
			err := s.Update(ctx, fn)
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		})
	}
	do("a", context.Background(), write("a"))
	waitWaiting(t, s, 1)
	do("b", context.Background(), func(tx store.Tx) error {
		if err := write("b")(tx); err != nil {
			return err
		}
		return refused
	})
	waitWaiting(t, s, 2)
	do("gone", cancelled, func(tx store.Tx) error { ranCancelled.Store(true); return nil })
	waitWaiting(t, s, 3)
	do("panics", context.Background(), func(tx store.Tx) error {
		if err := write("panics")(tx); err != nil {
			return err
		}
		panic("boom")
	})
	waitWaiting(t, s, 4)
	do("c", context.Background(), write("c"))
	waitWaiting(t, s, 5)
	cancel()
	close(release)
	updates.Wait()
	waitHeld()

	if errs["a"] != nil || errs["c"] != nil {
		t.Errorf("a: %v, c: %v; want both written", errs["a"], errs["c"])
	}
	if !errors.Is(errs["b"], refused) {
		t.Errorf("b: %v, want its own error", errs["b"])
	}
	if !errors.Is(errs["gone"], context.Canceled) || ranCancelled.Load() {
		t.Errorf("cancelled while waiting: %v, ran %v; want context.Canceled and not run", errs["gone"], ranCancelled.Load())
	}
	if p, _ := panicked.Load().(string); !strings.Contains(p, "boom") {
		t.Errorf("the panicking update's caller got %q, want its panic", p)
	}
	for id, want := range map[string]bool{"a": true, "b": false, "panics": false, "c": true} {
		if got := machineExists(t, s, id); got != want {
			t.Errorf("machine %s written: %v, want %v", id, got, want)
		}
		var lines []store.TimelineEntry
		if err := s.View(context.Background(), func(tx store.Tx) (err error) { lines, err = tx.Timeline("w-" + id); return err }); err != nil {
			t.Fatal(err)
		}
		if got := len(lines) == 1; got != want {
			t.Errorf("timeline of %s: %d lines, want written %v", id, len(lines), want)
		}
	}
}
