package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"runtime/debug"

	"einsora.dev/edge/hub/store"
)

// maxGroup is the most Updates one transaction takes: it bounds how long
// the last of them waits for the others' work before its commit.
const maxGroup = 64

// update is one Update waiting for its group's transaction.
type update struct {
	ctx context.Context
	fn  func(store.Tx) error
	// Set by the group, before Update returns.
	err error
	// panicked is what fn panicked with, and where, to panic with again
	// in the caller's goroutine.
	panicked any
	stack    []byte
}

// grouped runs fn in the transaction of the Updates that arrive while
// another commits (Dialect.GroupCommit): a commit is most of the cost of a
// small write on SQLite (the log's write, its checksums), and the writer's
// one connection runs Updates one at a time anyway. Each Update still
// fails alone: it runs inside a savepoint, rolled back on its error.
func (s *Store) grouped(ctx context.Context, fn func(store.Tx) error) error {
	u := &update{ctx: ctx, fn: fn}
	s.group.Do(u, s.commitGroup)
	if u.panicked != nil {
		panic(fmt.Sprintf("%v\n\nin a grouped store transaction, at:\n%s", u.panicked, u.stack))
	}
	return u.err
}

// commitGroup runs a group's Updates in one transaction and commits it.
// An Update whose context ended before its turn does not run. One alone
// runs as it would ungrouped, without a savepoint.
func (s *Store) commitGroup(group []*update) {
	live := group[:0:0]
	for _, u := range group {
		if err := u.ctx.Err(); err != nil {
			u.err = fmt.Errorf("store: %w", err)
			continue
		}
		live = append(live, u)
	}
	if len(live) == 0 {
		return
	}
	stmts := s.stmts[s.writer]
	// The transaction is everyone's: no one caller's context may end it.
	// Each Update's statements run under its own without its end, and
	// check it before each (tx.ended).
	ctx := context.Background()
	stmts.preparePending(ctx, s.writer)
	sqlTx, err := s.writer.BeginTx(ctx, &sql.TxOptions{Isolation: s.d.UpdateIsolation})
	if err != nil {
		for _, u := range live {
			u.err = fmt.Errorf("store: begin: %w", err)
		}
		return
	}
	savepoints := len(live) > 1
	var bound []boundStmt
	written := 0
	for _, u := range live {
		t := &tx{s: s, tx: sqlTx, ctx: u.ctx, stmtCtx: context.WithoutCancel(u.ctx), stmts: stmts, bound: bound}
		err := s.runOne(t, u, savepoints)
		bound = t.bound
		if err != nil {
			// The transaction cannot go on: none of the group is written.
			sqlTx.Rollback()
			for _, u := range live {
				if u.err == nil {
					u.err = err
				}
			}
			return
		}
		if u.err == nil {
			written++
		}
	}
	if written == 0 {
		sqlTx.Rollback()
		return
	}
	if err := sqlTx.Commit(); err != nil {
		for _, u := range live {
			if u.err == nil {
				u.err = fmt.Errorf("store: commit: %w", err)
			}
		}
		return
	}
	if s.committed != nil {
		s.committed()
	}
}

// runOne runs u's fn in t, inside a savepoint when others share the
// transaction, and sets u.err to its error. The error returned is one that
// leaves the transaction unable to go on (a savepoint that could not be
// rolled back: SQLite rolls the whole transaction back on some errors).
func (s *Store) runOne(t *tx, u *update, savepoint bool) error {
	if savepoint {
		if _, err := t.tx.ExecContext(t.stmtCtx, `SAVEPOINT grouped`); err != nil {
			return fmt.Errorf("store: savepoint: %w", err)
		}
	}
	u.err = s.call(t, u)
	if u.err == nil {
		if !savepoint {
			return nil
		}
		if _, err := t.tx.ExecContext(t.stmtCtx, `RELEASE grouped`); err != nil {
			return fmt.Errorf("store: release savepoint: %w", err)
		}
		return nil
	}
	if !savepoint {
		// Alone: its error rolls the whole transaction back.
		return u.err
	}
	for _, q := range []string{`ROLLBACK TO grouped`, `RELEASE grouped`} {
		if _, err := t.tx.ExecContext(t.stmtCtx, q); err != nil {
			// The others are told of the transaction's failure, not of
			// u's error, which is its caller's alone.
			return fmt.Errorf("store: a grouped transaction could not undo one of its updates (%s): %w", q, err)
		}
	}
	return nil
}

// call runs u.fn and writes its timeline lines, catching a panic so that
// the rest of the group is answered.
func (s *Store) call(t *tx, u *update) (err error) {
	defer func() {
		if r := recover(); r != nil {
			u.panicked, u.stack = r, debug.Stack()
			err = fmt.Errorf("store: the transaction's function panicked: %v", r)
		}
	}()
	if err := u.fn(t); err != nil {
		return err
	}
	return t.writeLines()
}
