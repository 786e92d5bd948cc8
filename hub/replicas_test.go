package hub

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
)

// listeningStore carries wake-ups between replicas like PostgreSQL's
// LISTEN/NOTIFY: Listen reports that notifications may have been missed,
// then holds until its context ends. Its reads are slow, so work left
// running after Run returns would still be running.
type listeningStore struct {
	store.Store
	listening chan struct{}
	views     atomic.Int64
}

func (s *listeningStore) Notify(context.Context, string) error { return nil }

func (s *listeningStore) Listen(ctx context.Context, wake func(string)) error {
	wake("")
	close(s.listening)
	<-ctx.Done()
	return nil
}

func (s *listeningStore) View(ctx context.Context, fn func(store.Tx) error) error {
	time.Sleep(50 * time.Millisecond)
	defer s.views.Add(1)
	return s.Store.View(context.WithoutCancel(ctx), fn)
}

// TestRunWaitsForEveryGoroutineItStarted: when Run returns, the replica
// listener and the work it handed off have stopped; nothing the hub
// started is left running.
func TestRunWaitsForEveryGoroutineItStarted(t *testing.T) {
	sq, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	st := &listeningStore{Store: sq, listening: make(chan struct{})}
	h, err := New(context.Background(), Config{AllowSim: true, Store: st, Clock: clock.NewFake(epoch), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	<-st.listening
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	// One read by Run's own start, one by the work the listener handed off
	// when it was told notifications may have been missed.
	n := st.views.Load()
	time.Sleep(200 * time.Millisecond)
	if later := st.views.Load(); later != n || n < 2 {
		t.Errorf("reads finished: %d when Run returned, %d after; want at least 2, all done when Run returned", n, later)
	}
}
