package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"

	_ "modernc.org/sqlite"
)

func openSQLite(t *testing.T) *Store {
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
