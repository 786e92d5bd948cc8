// Package postgres is the shared store: PostgreSQL through pgx's
// database/sql driver, for hubs run as several replicas on one database.
//
// Update transactions are SERIALIZABLE, so replicas never interleave into a
// state no serial order of their transactions could make; when PostgreSQL
// rolls one back for a serialisation failure (SQLSTATE 40001) or a deadlock
// (40P01), sqlstore runs fn again, a bounded number of times. View
// transactions are REPEATABLE READ, READ ONLY: one snapshot, never a
// conflict.
//
// Replicas learn of each other's changes by LISTEN/NOTIFY on the channel
// einsora_wake: the hub will call Notify after every commit that bumps a
// machine's generation, and every replica's Listen wakes that machine's
// local long poll. Nothing records which replica holds which poll: there
// is no presence table; every replica simply wakes its own.
package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlstore"
)

// Dialect is PostgreSQL's sqlstore dialect.
var Dialect = sqlstore.Dialect{
	Name:            "postgres",
	Dollar:          true,
	IsConflict:      func(err error) bool { return hasCode(err, "23505") },          // unique_violation
	IsRetryable:     func(err error) bool { return hasCode(err, "40001", "40P01") }, // serialization_failure, deadlock_detected
	UpdateIsolation: sql.LevelSerializable,
	ViewIsolation:   sql.LevelRepeatableRead,
	Collate:         ` COLLATE "C"`,
}

func hasCode(err error, codes ...string) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	for _, c := range codes {
		if pe.Code == c {
			return true
		}
	}
	return false
}

// Store is a store in a PostgreSQL database.
type Store struct {
	*sqlstore.Store
	db  *sql.DB
	dsn string
	// Logger receives Listen's reports of lost connections; nil is
	// slog.Default(). Set it before calling Listen.
	Logger *slog.Logger

	// onListen, when set (by tests), is called with the listening
	// connection's backend PID each time LISTEN succeeds.
	onListen func(pid uint32)
}

var _ store.Store = (*Store)(nil)

// MaxConns bounds the connections one store holds in its pool; Listen
// holds one more of its own.
const MaxConns = 16

// WriteBatch is the most machines a batch of writes (the hub's group commit
// of agents' reports, its presence batch) should take in one transaction. PostgreSQL records a
// serializable transaction's reads as predicate locks, and past
// max_pred_locks_per_relation in one table (by default 32, half of
// max_pred_locks_per_transaction) it locks the whole table: every
// concurrent writer of that table then conflicts with it, and a batch of
// hundreds of reports was rolled back again and again while other
// replicas wrote (docs/performance.md, issue 13).
const WriteBatch = 16

// Open connects to the database named by dsn (a postgres:// URL or a
// key=value string, as libpq reads them) and brings its schema up to
// date. Several replicas may open one database at once.
func Open(ctx context.Context, dsn string) (*Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	db.SetMaxOpenConns(MaxConns)
	db.SetMaxIdleConns(MaxConns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	s, err := sqlstore.New(ctx, db, db, Dialect, newID)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	return &Store{Store: s, db: db, dsn: dsn}, nil
}

// Close closes the connection pool. A running Listen ends with its
// context, not with Close.
func (s *Store) Close() error { return s.db.Close() }

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return "st-" + hex.EncodeToString(b[:])
}
