package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// countingStore counts the writes made through it.
type countingStore struct {
	store.Store
	writes atomic.Int64
}

type countingTx struct {
	store.Tx
	writes *atomic.Int64
}

func (s *countingStore) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.Store.Update(ctx, func(tx store.Tx) error { return fn(countingTx{tx, &s.writes}) })
}

func (t countingTx) PutMachine(m store.Machine) error {
	t.writes.Add(1)
	return t.Tx.PutMachine(m)
}

func (t countingTx) TouchMachines(ids []string, at time.Time) error {
	t.writes.Add(1)
	return t.Tx.TouchMachines(ids, at)
}

func (t countingTx) PutStatus(s store.StatusRecord) error {
	t.writes.Add(1)
	return t.Tx.PutStatus(s)
}

// An idle agent's polls cost far less than a write each: its last sync
// is written by the presence batch, every PresenceEvery, and the store's last
// sync stays within a batch of the truth (issue 13).
func TestIdlePollsWriteInBatches(t *testing.T) {
	h := newTestHub(t)
	counted := &countingStore{Store: h.st}
	h.store = counted
	h.machine("m-1")
	resp := h.sync("m-1", &protocol.SyncRequest{})
	req := protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: resp.StoreID, Generation: resp.Generation}
	counted.writes.Store(0)
	const polls = 300
	for i := range polls {
		h.clk.Advance(time.Second)
		if _, _, _, err := h.record("m-1", &req); err != nil {
			t.Fatal(err)
		}
		if i%15 == 14 {
			if err := h.touch(context.Background()); err != nil {
				t.Fatal(err)
			}
			m := h.machineRow("m-1")
			if behind := h.clk.Now().Sub(m.LastSync); behind > time.Second {
				t.Fatalf("after a batch, the store's last sync is %v behind", behind)
			}
		}
		if m := h.machineRow("m-1"); h.clk.Now().Sub(m.LastSync) >= h.feed.every+time.Second {
			t.Fatalf("poll %d: the store's last sync is %v behind", i, h.clk.Now().Sub(m.LastSync))
		}
	}
	w := counted.writes.Load()
	t.Logf("%d idle polls, %d writes", polls, w)
	if w > polls/10 {
		t.Errorf("%d idle polls cost %d writes, want far fewer than one a poll", polls, w)
	}
}

// online is whether the admin view shows machine id online.
func (h *testHub) online(id string) bool {
	h.t.Helper()
	v, err := h.Machine(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return v.Online
}

func (h *testHub) machineRow(id string) store.Machine {
	h.t.Helper()
	var m store.Machine
	err := h.st.View(context.Background(), func(tx store.Tx) (err error) { m, err = tx.Machine(id); return err })
	if err != nil {
		h.t.Fatal(err)
	}
	return m
}

// A vanished host goes offline by the 45 s rule, counted from when it
// was last heard, not from the presence batch that carried it: online at
// 44 s, offline at 46 s.
func TestVanishedHostGoesOfflineAfter45s(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	resp := h.sync("m-1", &protocol.SyncRequest{})
	req := protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: resp.StoreID, Generation: resp.Generation}
	h.clk.Advance(5 * time.Second)
	if _, _, _, err := h.record("m-1", &req); err != nil { // quiet: the batch carries it
		t.Fatal(err)
	}
	last := h.clk.Now()
	h.clk.Advance(10 * time.Second) // the host vanishes; the batch comes later
	if err := h.touch(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(last.Add(44 * time.Second).Sub(h.clk.Now()))
	if !h.online("m-1") {
		t.Errorf("offline 44 s after it was last heard")
	}
	h.clk.Advance(2 * time.Second)
	if h.online("m-1") {
		t.Errorf("online 46 s after it was last heard")
	}
}

// heldStore holds the next Update armed, before it commits, until
// released: a store too loaded to commit.
type heldStore struct {
	store.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *heldStore) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	if s.armed.CompareAndSwap(true, false) {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.Store.Update(ctx, fn)
}

// An overloaded hub fails no connected machine for being offline: the
// offline clock counts the machine's silence, never the hub's backlog. A
// machine whose report waits in the hub's queue is online; while this
// hub's presence batch cannot commit, nothing is failed for being
// offline; once it commits again, a machine truly silent is.
func TestOverloadedHubFailsNothingOffline(t *testing.T) {
	h := newTestHub(t)
	gate := &heldStore{Store: h.st, entered: make(chan struct{}), release: make(chan struct{})}
	h.store = gate
	h.ctl.store = gate
	h.machine("m-1")
	w := h.running("web")
	ctx := context.Background()
	// Another machine stays in touch throughout (its poll held), so the
	// hub is not simply cut off from every machine.
	h.machine("m-2")
	_, release := h.polls.wait("m-2", nil)
	defer release()

	// Its report waits in the hub's queue, behind a commit that does not
	// come, for longer than OfflineFailAfter.
	gate.armed.Store(true)
	synced := make(chan error, 1)
	go func() {
		_, err := h.Sync(ctx, "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version})
		synced <- err
	}()
	<-gate.entered
	h.clk.Advance(h.cfg.OfflineFailAfter + time.Minute)
	h.pass()
	if got := h.workload(w.ID); got.State != store.StateRunning {
		t.Fatalf("its report waited in the hub's queue, and the hub made it %s: %s", got.State, got.Reason)
	}
	gate.release <- struct{}{}
	if err := <-synced; err != nil {
		t.Fatal(err)
	}

	// A quiet sync, for the presence batch to carry; then the machine is
	// silent, and this hub's presence batch is stuck before its commit:
	// presence is blind, nothing is failed.
	// (The report that waited carries the time it arrived: the next one
	// writes the machine's row, the one after is quiet.)
	for range 2 {
		h.clk.Advance(time.Second)
		if _, _, _, err := h.record("m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version}); err != nil {
			t.Fatal(err)
		}
	}
	gate.armed.Store(true)
	touched := make(chan error, 1)
	go func() { touched <- h.touch(ctx) }()
	<-gate.entered
	h.clk.Advance(h.cfg.OfflineFailAfter + time.Minute)
	h.pass()
	if got := h.workload(w.ID); got.State != store.StateRunning {
		t.Fatalf("while its own presence writes were stuck, the hub made it %s: %s", got.State, got.Reason)
	}
	gate.release <- struct{}{}
	if err := <-touched; err != nil {
		t.Fatal(err)
	}
	// The batch committed: the machine's silence is real.
	h.pass()
	if got := h.workload(w.ID); got.State != store.StateFailed {
		t.Errorf("silent past OfflineFailAfter with presence healthy: %s, want failed", got.State)
	}
}

// batchOf lists a batch's machines, with when each is written.
func batchOf(b map[time.Time][]string) map[string]time.Time {
	out := make(map[string]time.Time)
	for at, ids := range b {
		for _, id := range ids {
			out[id] = at
		}
	}
	return out
}

// Issue 13: a held poll's sign of life moves only when its peer answers a
// keepalive probe, every 25 s, and the batch comes every 15 s: a batch
// writes it only when it moved since this replica last wrote it. A
// failed batch's are written by the next; a quiet sync is written
// whatever the poll held; the polls no longer held are forgotten.
func TestPresenceBatchWritesAHeldPollsSignOfLifeOnlyWhenItMoved(t *testing.T) {
	f := newPresenceFeed(15 * time.Second)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	held := map[string]time.Time{"a": t0.Add(300 * time.Millisecond), "b": t0.Add(700 * time.Millisecond)}
	step := func(now time.Time, err error) map[string]time.Time {
		t.Helper()
		b := f.begin(now, held)
		f.end(b, err)
		return batchOf(b)
	}
	if got := step(t0.Add(time.Second), nil); len(got) != 2 || !got["a"].Equal(t0) || !got["b"].Equal(t0) {
		t.Fatalf("first batch = %v, want a and b at %v", got, t0)
	}
	if got := step(t0.Add(16*time.Second), nil); len(got) != 0 {
		t.Errorf("signs of life unchanged, the batch wrote %v", got)
	}
	held["a"] = t0.Add(25*time.Second + 100*time.Millisecond)
	if got := step(t0.Add(31*time.Second), nil); len(got) != 1 || !got["a"].Equal(t0.Add(25*time.Second)) {
		t.Errorf("a's sign of life moved: the batch wrote %v, want a alone at +25s", got)
	}
	held["b"] = t0.Add(26 * time.Second)
	if got := step(t0.Add(46*time.Second), errors.New("store: commit: database is locked")); len(got) != 1 || got["b"].IsZero() {
		t.Fatalf("b's sign of life moved: the batch wrote %v", got)
	}
	if got := step(t0.Add(61*time.Second), nil); len(got) != 1 || !got["b"].Equal(t0.Add(26*time.Second)) {
		t.Errorf("after a failed batch, the next wrote %v, want b at +26s", got)
	}
	f.note("a", t0.Add(62*time.Second))
	if got := step(t0.Add(76*time.Second), nil); len(got) != 1 || !got["a"].Equal(t0.Add(62*time.Second)) {
		t.Errorf("a's quiet sync: the batch wrote %v, want a at +62s", got)
	}
	delete(held, "b")
	step(t0.Add(91*time.Second), nil)
	if len(f.written) != len(held) {
		t.Errorf("%d polls held, %d remembered: the polls no longer held must be forgotten", len(held), len(f.written))
	}
}

// touchesPerUpdate records the machines each write transaction touched.
type touchesPerUpdate struct {
	store.Store
	touched []int
	// contended makes every Update roll back as contended.
	contended bool
}

type touchCountingTx struct {
	store.Tx
	n *int
}

func (t touchCountingTx) TouchMachines(ids []string, at time.Time) error {
	*t.n += len(ids)
	return t.Tx.TouchMachines(ids, at)
}

func (s *touchesPerUpdate) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	n := 0
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if err := fn(touchCountingTx{tx, &n}); err != nil {
			return err
		}
		if s.contended {
			return fmt.Errorf("%w after 20 conflicting attempts: touch %d machines", store.ErrContended, n)
		}
		return nil
	})
	s.touched = append(s.touched, n)
	return err
}

// With a write batch limit (PostgreSQL's), the presence batch takes a
// transaction per so many machines, and every machine heard is written.
func TestPresenceBatchKeepsToTheWriteLimit(t *testing.T) {
	h := newTestHub(t)
	h.cfg.WriteBatch = 4
	counted := &touchesPerUpdate{Store: h.st}
	h.store = counted
	for i := range 10 {
		id := fmt.Sprintf("m-%d", i)
		h.machine(id)
		// Heard at two times: two groups, split across transactions.
		h.feed.note(id, h.clk.Now().Add(time.Duration(i%2)*time.Second))
	}
	h.clk.Advance(2 * time.Second)
	counted.touched = nil // the machines' enrolments
	if err := h.touch(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []int{4, 4, 2}; !slices.Equal(counted.touched, want) {
		t.Errorf("machines per presence transaction %v, want %v", counted.touched, want)
	}
	for i := range 10 {
		id := fmt.Sprintf("m-%d", i)
		if got, want := h.machineRow(id).LastSync, epoch.Add(time.Duration(i%2)*time.Second); !got.Equal(want) {
			t.Errorf("%s: last sync %v, want %v", id, got, want)
		}
	}
	// Nothing heard: still one transaction, the replica's probe of its store.
	counted.touched = nil
	if err := h.touch(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []int{0}; !slices.Equal(counted.touched, want) {
		t.Errorf("an empty presence batch took %v transactions, want %v", counted.touched, want)
	}
}

// A presence batch rolled back for conflicts with other replicas' writes
// says the store answers: the replica stays ready and keeps its polls (it
// sent thousands of agents away as if cut off, at 10,000 agents on three
// replicas), but fails nothing for being offline until a batch is written,
// which then carries the machines heard.
func TestContendedPresenceBatchKeepsTheReplicaReady(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	h.clk.Advance(h.feed.every) // past the start, when the hub is blind anyway
	counted := &touchesPerUpdate{Store: h.st, contended: true}
	h.store = counted
	heard := h.clk.Now()
	h.feed.note("m-1", heard)
	if err := h.touch(context.Background()); !errors.Is(err, store.ErrContended) {
		t.Fatalf("touch: %v, want store.ErrContended", err)
	}
	if err := h.Ready(context.Background()); err != nil {
		t.Errorf("a replica whose presence batch was contended is not ready: %v", err)
	}
	if !h.presence.blind() {
		t.Error("a replica whose presence batch was contended judges machines offline by what it could not write")
	}
	counted.contended = false
	h.clk.Advance(time.Second)
	if err := h.touch(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.machineRow("m-1").LastSync; !got.Equal(heard) {
		t.Errorf("after the next batch, last sync %v, want %v (heard in the contended one)", got, heard)
	}
	if h.presence.blind() {
		t.Error("still blind after a batch was written")
	}
}
