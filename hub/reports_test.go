package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// gatedStore counts write transactions and holds the first one until
// released, so a test can line reports up behind it.
type gatedStore struct {
	store.Store
	updates atomic.Int64
	gate    chan struct{}
}

func (g *gatedStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	if g.updates.Add(1) == 1 {
		<-g.gate
	}
	return g.Store.Update(ctx, fn)
}

// waitQueued waits until n reports wait behind the batch committing.
func waitQueued(t *testing.T, h *Hub, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		queued := h.reports.Waiting()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d reports queued", queued)
		}
		time.Sleep(time.Millisecond)
	}
}

// Reports arriving together are written in one transaction, and a report
// refused on its own fails alone.
func TestReportsAreGroupCommitted(t *testing.T) {
	h := newTestHub(t)
	const n = 20
	for i := range n {
		h.machine(fmt.Sprintf("m-%d", i))
	}
	g := &gatedStore{Store: h.st, gate: make(chan struct{})}
	h.store = g

	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		id := fmt.Sprintf("m-%d", i) // m-20 is not registered
		wg.Go(func() {
			_, errs[i] = h.Sync(context.Background(), id, &protocol.SyncRequest{ProtocolVersion: protocol.Version,
				Statuses: []protocol.Status{{Workload: "w-1", Attempt: 1, Mode: protocol.ModeRun, Code: protocol.CodeRunning}}})
		})
	}
	// The first report's transaction is held; the rest queue behind it.
	waitQueued(t, h.Hub, n)
	close(g.gate)
	wg.Wait()
	for i, err := range errs {
		switch {
		case i == n && !errors.Is(err, ErrUnknownMachine):
			t.Errorf("unregistered machine: got %v, want ErrUnknownMachine", err)
		case i < n && err != nil:
			t.Errorf("machine m-%d: %v", i, err)
		}
	}
	if got := g.updates.Load(); got != 2 {
		t.Errorf("%d reports took %d write transactions, want 2 (the first, then the rest together)", n+1, got)
	}
}

// TestDetailIsBoundedAndStripped: rule 10's bound on what an agent says of
// a workload, applied where the report is recorded.
func TestDetailIsBoundedAndStripped(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	w := h.create("web", protocol.KindContainer)
	h.pass()
	w = h.workload(w.ID)
	s := status(w, protocol.ModeRun, protocol.CodeStarting)
	s.Detail = strings.Repeat("\x1b[31mred\u202e", 1<<17)
	h.report("m-1", h.desired("m-1"), s)
	var got string
	h.st.View(t.Context(), func(tx store.Tx) error {
		ss, err := tx.Statuses("m-1")
		if err == nil && len(ss) == 1 {
			got = ss[0].Detail
		}
		return err
	})
	if len(got) > protocol.MaxDetail || strings.ContainsRune(got, 0x1b) || strings.ContainsRune(got, 0x202e) {
		t.Errorf("stored detail of %d bytes with escapes: %q…", len(got), got[:min(len(got), 40)])
	}
}

// contendedStore refuses, as contended, every write transaction that read
// more than one machine: a store whose large transactions keep
// conflicting with other replicas' past its retries.
type contendedStore struct {
	store.Store
	refused atomic.Int64
}

type machineCountingTx struct {
	store.Tx
	read map[string]bool
}

func (t *machineCountingTx) Machine(id string) (store.Machine, error) {
	t.read[id] = true
	return t.Tx.Machine(id)
}

func (s *contendedStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.Update(ctx, func(tx store.Tx) error {
		ct := &machineCountingTx{Tx: tx, read: map[string]bool{}}
		if err := fn(ct); err != nil {
			return err
		}
		if len(ct.read) > 1 {
			s.refused.Add(1)
			return fmt.Errorf("%w after 20 conflicting attempts: could not serialize access", store.ErrContended)
		}
		return nil
	})
}

// A batch of reports the store keeps refusing for conflicts is committed
// in smaller parts, down to one report: no agent is sent away for the
// size of the batch it happened to join.
func TestContendedReportBatchIsCommittedInParts(t *testing.T) {
	h := newTestHub(t)
	const n = 20
	contended := &contendedStore{Store: h.st}
	for i, err := range syncBehindGate(t, h, contended, n, "v-split") {
		if err != nil {
			t.Errorf("machine m-%d: %v", i, err)
		}
	}
	if refused := contended.refused.Load(); refused == 0 {
		t.Errorf("no batch was refused: the test did not contend")
	}
	for i := range n {
		if got := h.machineRow(fmt.Sprintf("m-%d", i)).AgentVersion; got != "v-split" {
			t.Errorf("m-%d: agent version %q stored, want v-split", i, got)
		}
	}
}

// syncBehindGate registers machines m-0 to m-(n-1), then syncs each once
// with agent version v through st, the first sync's transaction held until
// the others queue behind it, and returns their errors.
func syncBehindGate(t *testing.T, h *testHub, st store.Store, n int, v string) []error {
	t.Helper()
	for i := range n {
		h.machine(fmt.Sprintf("m-%d", i))
	}
	g := &gatedStore{Store: st, gate: make(chan struct{})}
	h.store = g
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = h.Sync(context.Background(), fmt.Sprintf("m-%d", i), &protocol.SyncRequest{ProtocolVersion: protocol.Version, AgentVersion: v})
		})
	}
	waitQueued(t, h.Hub, n-1)
	close(g.gate)
	wg.Wait()
	return errs
}

// machinesPerUpdate records how many machines each write transaction read.
type machinesPerUpdate struct {
	store.Store
	mu   sync.Mutex
	read []int
}

func (s *machinesPerUpdate) Update(ctx context.Context, fn func(store.Tx) error) error {
	var n int
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		ct := &machineCountingTx{Tx: tx, read: map[string]bool{}}
		err := fn(ct)
		n = len(ct.read)
		return err
	})
	s.mu.Lock()
	s.read = append(s.read, n)
	s.mu.Unlock()
	return err
}

// With a report batch limit (PostgreSQL's), the reports waiting are written
// in transactions of at most that many machines, every one of them.
func TestReportBatchesKeepToTheirLimit(t *testing.T) {
	h := openTestHubWith(t, Config{WriteBatch: 4})
	const n = 19
	counted := &machinesPerUpdate{Store: h.st}
	for i, err := range syncBehindGate(t, h, counted, n, "v-batched") {
		if err != nil {
			t.Errorf("machine m-%d: %v", i, err)
		}
		if got := h.machineRow(fmt.Sprintf("m-%d", i)).AgentVersion; got != "v-batched" {
			t.Errorf("m-%d: agent version %q stored, want v-batched", i, got)
		}
	}
	// The first alone (held at the gate), then 18 in batches of 4.
	if want := []int{1, 4, 4, 4, 4, 2}; !slices.Equal(counted.read, want) {
		t.Errorf("machines per write transaction %v, want %v", counted.read, want)
	}
}

// Issue 13: every sync records its report, quiet ones too, and a report
// read the record of each workload on its machine to know which it holds.
// It reads their IDs, and the records only when the machine returns (a
// reboot, a restarted agent, a cut), to tell each on its timeline.
func TestReportReadsWorkloadRecordsOnlyOnItsMachinesReturn(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	h.sync("m-1", &protocol.SyncRequest{BootID: "boot-1", AgentStarted: epoch})
	w := h.running("web")
	gen := h.desired("m-1").Generation
	counted := &callCountingStore{Store: h.st, calls: map[string]int{}}
	h.store = counted
	report := func(boot string, detail string) {
		t.Helper()
		st := status(w, protocol.ModeRun, protocol.CodeRunning)
		st.Generation, st.Detail = gen, detail
		stranger := st
		stranger.Workload = "w-not-here"
		req := &protocol.SyncRequest{ProtocolVersion: protocol.Version, BootID: boot, AgentStarted: epoch, Generation: gen, AppliedGeneration: gen,
			Statuses: []protocol.Status{st, stranger}}
		if _, _, _, err := h.record("m-1", req); err != nil {
			t.Fatal(err)
		}
		var got []store.StatusRecord
		h.st.View(context.Background(), func(tx store.Tx) (err error) { got, err = tx.Statuses("m-1"); return err })
		if len(got) != 1 || got[0].Workload != w.ID || got[0].Detail != detail {
			t.Errorf("statuses of m-1 after a report of %s (%q) and of a workload not on it: %+v", w.ID, detail, got)
		}
	}
	report("boot-1", "serving")
	if n := counted.calls["Workloads"]; n != 0 {
		t.Errorf("a report read its machine's workload records %d times, want none", n)
	}
	h.clk.Advance(5 * time.Minute)
	report("boot-2", "serving again")
	if n := counted.calls["Workloads"]; n != 1 {
		t.Errorf("a rebooted machine's report read its workload records %d times, want once", n)
	}
	es, _ := h.Timeline(context.Background(), w.ID)
	if last := es[len(es)-1].Text; !strings.Contains(last, "rebooted") {
		t.Errorf("timeline ends %q, want the reboot told", last)
	}
}
