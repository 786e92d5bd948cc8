package fleetbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"einsora.dev/edge/internal/pgtest"
)

// startPostgres starts a throwaway server when no -store is given (see
// internal/pgtest: a cluster in a temporary directory, reached on a unix
// socket there only, durability off) and returns its postgres:// URL.
func startPostgres() (dsn string, stop func(), err error) {
	srv, err := pgtest.StartServer()
	if errors.Is(err, pgtest.ErrUnavailable) {
		return "", nil, fmt.Errorf("%w: install PostgreSQL or give -store postgres://…", err)
	}
	if err != nil {
		return "", nil, err
	}
	if dsn, err = srv.URL(); err != nil {
		srv.Stop()
		return "", nil, err
	}
	return dsn, srv.Stop, nil
}

var schemaName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// pgSchema creates schema name in the database of dsn and returns a DSN
// whose search_path is it: a database of its own as far as the hub can
// tell, so each measured target starts empty.
func pgSchema(ctx context.Context, dsn, name string) (string, error) {
	if !schemaName.MatchString(name) {
		return "", fmt.Errorf("schema name %q", name)
	}
	if err := pgExec(ctx, dsn, "CREATE SCHEMA "+name); err != nil {
		return "", fmt.Errorf("create schema %s: %w", name, err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("-store: %w", err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// dropPGSchema removes what pgSchema made, best effort.
func dropPGSchema(dsn, name string) error {
	if !schemaName.MatchString(name) {
		return fmt.Errorf("schema name %q", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return pgExec(ctx, dsn, "DROP SCHEMA "+name+" CASCADE")
}

func pgExec(ctx context.Context, dsn, stmt string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}
