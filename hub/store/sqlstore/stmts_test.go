package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"

	_ "modernc.org/sqlite"
)

func openSQLite(t testing.TB) *Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hub.db")
	open := func(lock string, conns int) *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock="+lock)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(conns)
		t.Cleanup(func() { db.Close() })
		return db
	}
	s, err := New(context.Background(), open("immediate", 1), open("deferred", 4), SQLite, func() string { return "st-test" })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Issue 13: SQLite parsed every statement again in every transaction. A
// statement a transaction ran is prepared before the pool's next one and
// kept, on the one-connection writer pool too (without waiting on the
// connection its own transaction holds), and reads through it return
// what was written.
func TestStatementsArePreparedOnceAndKept(t *testing.T) {
	s := openSQLite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i := range 3 {
		m := store.Machine{ID: fmt.Sprint("m-", i), Name: "box", Owner: "acme", Region: "eu", LastSync: at, Registered: at}
		if err := s.Update(ctx, func(tx store.Tx) error { return tx.PutMachine(m) }); err != nil {
			t.Fatal(err)
		}
		var got store.Machine
		if err := s.View(ctx, func(tx store.Tx) (err error) { got, err = tx.Machine(m.ID); return err }); err != nil {
			t.Fatal(err)
		}
		if got.ID != m.ID || !got.LastSync.Equal(at) {
			t.Fatalf("read %+v, want %s synced at %s", got, m.ID, at)
		}
	}
	for name, db := range map[string]*sql.DB{"writer": s.writer, "reader": s.reader} {
		c := s.stmts[db]
		c.mu.Lock()
		n := len(c.ready)
		c.mu.Unlock()
		if n == 0 {
			t.Errorf("the %s pool keeps no prepared statement after three transactions", name)
		}
	}
}

// The statements kept are bounded, however many query texts come.
func TestStatementCacheIsBounded(t *testing.T) {
	s := openSQLite(t)
	c := s.stmts[s.reader]
	for i := range 3 * maxStmts {
		c.get(fmt.Sprintf("SELECT %d", i))
		if i%50 == 0 {
			c.preparePending(context.Background(), s.reader)
		}
	}
	c.preparePending(context.Background(), s.reader)
	if n := len(c.ready) + len(c.pending) + len(c.refused); n > maxStmts {
		t.Fatalf("%d statements kept, want at most %d", n, maxStmts)
	}
	if len(c.ready) == 0 {
		t.Fatal("nothing was prepared")
	}
}

// A transaction's timeline lines are written together, a few INSERTs of
// sizes from a short list, so however many lines come the statement
// texts stay few (and prepared) instead of filling the bounded cache.
func TestTimelineWritesKeepFewStatements(t *testing.T) {
	s := openSQLite(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	total := 0
	for n := 1; n <= 2*rowsPerStatement+20; n++ {
		err := s.Update(ctx, func(tx store.Tx) error {
			for i := range n {
				if err := tx.AddTimeline(store.TimelineEntry{Workload: "w-1", At: at, Text: fmt.Sprint(i)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	var got []store.TimelineEntry
	if err := s.View(ctx, func(tx store.Tx) (err error) { got, err = tx.Timeline("w-1"); return err }); err != nil {
		t.Fatal(err)
	}
	if len(got) != total {
		t.Fatalf("%d lines written, want %d", len(got), total)
	}
	c := s.stmts[s.writer]
	c.mu.Lock()
	defer c.mu.Unlock()
	texts := 0
	for _, m := range []map[string]bool{c.pending, c.refused} {
		for q := range m {
			if strings.Contains(q, "INTO timeline") {
				texts++
			}
		}
	}
	for q := range c.ready {
		if strings.Contains(q, "INTO timeline") {
			texts++
		}
	}
	// 1, 2, 4, … rowsPerStatement: one text for each.
	if want := bits.Len(rowsPerStatement); texts > want {
		t.Fatalf("%d INSERT texts for the timeline, want at most %d", texts, want)
	}
}

// Every query of workloads by state is served by an index led by state
// (workloads_waiting), the one such index left: the index on state alone
// was dropped, one write fewer at each state move. Deleting a workload's
// statuses finds them by workload through an index, not by reading every
// machine's.
func TestQueriesByStateAndWorkloadUseAnIndex(t *testing.T) {
	s := openSQLite(t)
	ctx := context.Background()
	plan := func(query string, args ...any) string { t.Helper(); return queryPlan(t, s, query, args...) }
	waiting := []store.State{store.StatePending, store.StateQueued}
	for _, f := range []store.WorkloadFilter{
		{States: waiting},
		{States: waiting, Region: "eu", Limit: 100},
		{States: waiting, AfterID: "w-1", AfterCreated: time.Unix(1, 0)},
		{States: []store.State{store.StateRunning}},
	} {
		query, args := workloadsQuery(f, SQLite.Collate)
		if got := plan(query, args...); !strings.Contains(got, "USING INDEX workloads_waiting (state=?") {
			t.Errorf("%+v: plan %q, want a search of workloads_waiting by state", f, got)
		}
	}
	var n int
	if err := s.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'workloads_state'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("workloads_state: %d, %v; want it dropped", n, err)
	}
	if got := plan(deleteStatusesOf, "w-1"); !strings.Contains(got, "USING INDEX statuses_workload (workload=?)") {
		t.Errorf("deleting a workload's statuses: plan %q, want a search of statuses_workload", got)
	}
}

// queryPlan is SQLite's plan for query, its steps joined by "; ".
func queryPlan(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	rows, err := s.reader.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var steps []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, detail)
	}
	return strings.Join(steps, "; ")
}

// The writes of many rows find each row by its key, not by a scan of
// the table: a burst writes thousands of them into a table of as many.
func TestWritesOfManyRowsFindTheirRowsByKey(t *testing.T) {
	s := openSQLite(t)
	for _, c := range []struct {
		name, query, want string
		args              int
	}{
		{"PutWorkloads", putWorkloadsQueries[rowsPerStatement], "SEARCH workloads USING COVERING INDEX sqlite_autoindex_workloads_1 (id=?)", len(workloadTypes)},
		{"BumpMachines", bumpMachinesQueries[rowsPerStatement], "SEARCH machines USING INDEX sqlite_autoindex_machines_1 (id=?)", 2},
	} {
		args := make([]any, c.args*rowsPerStatement)
		for i := range args {
			args[i] = "x"
		}
		if got := queryPlan(t, s, c.query, args...); !strings.Contains(got, c.want) {
			t.Errorf("%s: plan %q, want %q", c.name, got, c.want)
		}
	}
}

// A batch runs the same few statements hundreds of times: each kept
// statement is bound to the transaction once (sql.Tx.StmtContext
// allocates a statement the transaction keeps to its end), and each read
// through the bound one still reads its own row.
func TestTransactionBindsEachStatementOnce(t *testing.T) {
	s := openSQLite(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const n = 50
	if err := s.Update(ctx, func(tx store.Tx) error {
		for i := range n {
			if err := tx.PutMachine(store.Machine{ID: fmt.Sprint("m-", i), Name: fmt.Sprint("box-", i), Owner: "acme", Region: "eu", Registered: at}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Twice: the first transaction notes the statement, which is
	// prepared before the next, and bound there once.
	for round := range 2 {
		if err := s.View(ctx, func(stx store.Tx) error {
			for i := range n {
				m, err := stx.Machine(fmt.Sprint("m-", i))
				if err != nil {
					return err
				}
				if want := fmt.Sprint("box-", i); m.Name != want {
					return fmt.Errorf("read %s, want %s", m.Name, want)
				}
			}
			if bound := len(stx.(*tx).bound); round == 1 && bound != 1 {
				return fmt.Errorf("%d reads of one prepared statement bound it %d times, want once", n, bound)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// SQLite's statements run under a context without an end: the driver
// watched each one's context with a goroutine of its own. The
// transaction's context still ends it: the next statement, a write or a
// read of rows or of one row, fails with the context's error, and nothing
// of the transaction is written.
func TestStatementsRunOutAndTheTransactionStillEnds(t *testing.T) {
	s := openSQLite(t)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	next := map[string]func(store.Tx) error{
		"write": func(tx store.Tx) error {
			return tx.PutMachine(store.Machine{ID: "m-2", Name: "box", Owner: "acme", Region: "eu", Registered: at})
		},
		"rows":    func(tx store.Tx) error { _, err := tx.Machines(); return err },
		"one row": func(tx store.Tx) error { _, err := tx.Machine("m-1"); return err },
	}
	for name, statement := range next {
		ctx, cancel := context.WithCancel(context.Background())
		var err error
		s.Update(ctx, func(stx store.Tx) error {
			if done := stx.(*tx).stmtCtx.Done(); done != nil {
				t.Error("a SQLite statement runs under a context that can end")
			}
			if err := stx.PutMachine(store.Machine{ID: "m-1", Name: "box", Owner: "acme", Region: "eu", Registered: at}); err != nil {
				return err
			}
			cancel()
			err = statement(stx)
			return err
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a %s after the context ended: %v, want %v", name, err, context.Canceled)
		}
		viewCtx, cancelView := context.WithCancel(context.Background())
		if err := s.View(viewCtx, func(stx store.Tx) error {
			if done := stx.(*tx).stmtCtx.Done(); done != nil {
				t.Error("a SQLite read runs under a context that can end")
			}
			_, err := stx.Machine("m-1")
			return err
		}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the machine of a transaction whose context ended: %v, want %v", err, store.ErrNotFound)
		}
		cancelView()
	}
}
