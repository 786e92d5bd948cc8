package sqlstore

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"time"
)

// stmtCache keeps a pool's statements prepared across transactions.
// SQLite parsed every statement again in every transaction: a quarter of
// the hub's CPU for an idle poll and a sixth of a change's
// (docs/performance.md). A statement is prepared on the pool, which needs a
// free connection, so one first seen in a transaction runs unprepared and
// is prepared before the pool's next transaction begins.
type stmtCache struct {
	// mu guards the following fields.
	mu sync.Mutex
	// ready are the prepared statements by query; pending the queries
	// seen since, to prepare; refused those that cannot be (not kept).
	ready   map[string]*sql.Stmt
	pending map[string]bool
	refused map[string]bool
}

// maxStmts bounds the statements kept: query texts are the package's
// own, but a few vary with their arguments' count (IN lists).
const maxStmts = 256

func newStmtCache() *stmtCache {
	return &stmtCache{ready: map[string]*sql.Stmt{}, pending: map[string]bool{}, refused: map[string]bool{}}
}

// cacheable reports whether a query is one statement of the kinds kept.
func cacheable(query string) bool {
	if strings.Contains(query, ";") {
		return false
	}
	head := strings.ToUpper(strings.TrimSpace(query))
	for _, kw := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "WITH"} {
		if strings.HasPrefix(head, kw) {
			return true
		}
	}
	return false
}

// get returns query's prepared statement, or nil; a query not prepared
// yet is noted for the next preparePending.
func (c *stmtCache) get(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.ready[query]; st != nil {
		return st
	}
	if !c.refused[query] && len(c.ready)+len(c.pending)+len(c.refused) < maxStmts {
		c.pending[query] = true
	}
	return nil
}

// preparePending prepares the queries noted since the last call on db,
// outside any transaction. One that fails to prepare (or is not of a kind
// kept) is never tried again.
func (c *stmtCache) preparePending(ctx context.Context, db *sql.DB) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.mu.Unlock()
		return
	}
	var queries []string
	for q := range c.pending {
		queries = append(queries, q)
	}
	clear(c.pending)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, q := range queries {
		var st *sql.Stmt
		var err error
		if cacheable(q) {
			st, err = db.PrepareContext(ctx, q)
		}
		c.mu.Lock()
		switch {
		case st != nil && err == nil && c.ready[q] == nil:
			c.ready[q] = st
		case st != nil:
			st.Close() // another caller prepared it first
		case ctx.Err() == nil:
			c.refused[q] = true
		}
		c.mu.Unlock()
	}
}
