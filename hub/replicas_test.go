package hub

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
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

// bus carries notifications between hubs on one store, as PostgreSQL's
// LISTEN/NOTIFY does between replicas.
type bus struct {
	mu    sync.Mutex
	wakes []func(string)
}

func (b *bus) listeners() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.wakes)
}

type busStore struct {
	store.Store
	bus *bus
}

func (s busStore) Notify(_ context.Context, payload string) error {
	s.bus.mu.Lock()
	wakes := slices.Clone(s.bus.wakes)
	s.bus.mu.Unlock()
	for _, wake := range wakes {
		wake(payload)
	}
	return nil
}

func (s busStore) Listen(ctx context.Context, wake func(string)) error {
	s.bus.mu.Lock()
	s.bus.wakes = append(s.bus.wakes, wake)
	s.bus.mu.Unlock()
	<-ctx.Done()
	return nil
}

// A revocation ends the machine's waiting poll on whichever replica holds
// it, at once: a poll is held for minutes.
func TestRevocationEndsThePollOnEveryReplica(t *testing.T) {
	for _, revoke := range []struct {
		name string
		do   func(h *Hub, machineID, serial string) error
	}{
		{"machine", func(h *Hub, id, _ string) error { return h.RevokeMachine(context.Background(), id) }},
		{"certificate", func(h *Hub, id, serial string) error { return h.RevokeCertificate(context.Background(), id, serial) }},
	} {
		t.Run(revoke.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "hub.db")
			b := &bus{}
			open := func() *testHub {
				h := openTestHub(t, path, clock.NewFake(epoch))
				h.store = busStore{Store: h.store, bus: b}
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				wg.Go(func() { h.listenReplicas(ctx, &wg) })
				t.Cleanup(func() { cancel(); wg.Wait() })
				return h
			}
			one, two := open(), open()
			for b.listeners() < 2 {
				time.Sleep(time.Millisecond)
			}
			one.machine("m-1")
			const serial = "0a1b"
			if err := one.store.Update(context.Background(), func(tx store.Tx) error {
				return tx.PutCertificate(store.Certificate{Serial: serial, Machine: "m-1", Issued: epoch, Expires: epoch.Add(time.Hour)})
			}); err != nil {
				t.Fatal(err)
			}
			d := two.desired("m-1")
			got := make(chan error, 1)
			go func() {
				_, err := two.Sync(context.Background(), "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: d.StoreID, Generation: d.Generation})
				got <- err
			}()
			waitTimers(t, two.clk, 1)
			if err := revoke.do(one.Hub, "m-1", serial); err != nil {
				t.Fatal(err)
			}
			select {
			case <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("the poll held by the other replica kept waiting after the revocation")
			}
		})
	}
}
