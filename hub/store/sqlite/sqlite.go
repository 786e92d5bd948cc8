// Package sqlite is the embedded store: one SQLite file in WAL mode, through
// the pure-Go modernc.org/sqlite driver, so the hub needs no cgo.
package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlstore"
)

// Store is a store in one SQLite file.
type Store struct {
	*sqlstore.Store
	writer, reader *sql.DB
	ckpt           *checkpointer
}

var _ store.Store = (*Store)(nil)

// Open opens or creates the store at path and brings its schema up to date.
func Open(ctx context.Context, path string) (*Store, error) {
	if err := private(path); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	dsn := func(txlock string, pragmas ...string) string {
		q := url.Values{}
		q.Add("_pragma", "busy_timeout(10000)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Add("_pragma", "foreign_keys(1)")
		// Updates that share a commit each run in a savepoint, which
		// journals every page it first writes so that it can be undone
		// alone. In a temp file those writes were a tenth of the store's
		// CPU in a burst (issue 13). The journal lasts one savepoint, so
		// in memory it loses nothing that a crash would not.
		q.Add("_pragma", "temp_store(MEMORY)")
		for _, p := range pragmas {
			q.Add("_pragma", p)
		}
		q.Set("_txlock", txlock)
		return "file:" + path + "?" + q.Encode()
	}
	// One writer connection taking its lock at BEGIN, so two writers never
	// deadlock upgrading read locks; readers run beside it under WAL.
	writer, err := sql.Open("sqlite", dsn("immediate", fmt.Sprintf("wal_autocheckpoint(%d)", writerCheckpointPages)))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	reader, err := sql.Open("sqlite", dsn("deferred"))
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	reader.SetMaxOpenConns(4)
	if err := writer.PingContext(ctx); err != nil {
		writer.Close()
		reader.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s, err := sqlstore.New(ctx, writer, reader, sqlstore.SQLite, newID)
	if err != nil {
		writer.Close()
		reader.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	ckptDB, err := sql.Open("sqlite", dsn("deferred"))
	if err != nil {
		writer.Close()
		reader.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	ckptDB.SetMaxOpenConns(1)
	ckpt := startCheckpointer(ckptDB)
	s.OnCommit(ckpt.committed)
	return &Store{Store: s, writer: writer, reader: reader, ckpt: ckpt}, nil
}

// Close stops the checkpointer and closes the connection pools.
func (s *Store) Close() error {
	return errors.Join(s.ckpt.close(), s.writer.Close(), s.reader.Close())
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return "st-" + hex.EncodeToString(b[:])
}

// private makes the database file its owner's alone before SQLite opens
// it (SQLite gives its -wal and -shm files the database's mode), and
// narrows files an older hub left open to others: they hold the fleet's
// state and the hashes of its tokens.
func private(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}
