package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// migrations are applied in order, each once, each in its own transaction.
// Append only: a released migration never changes. {{serial}} is the
// dialect's auto-increment key.
var migrations = []string{
	`CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
	CREATE TABLE tenants (name TEXT PRIMARY KEY, created BIGINT NOT NULL);
	CREATE TABLE classes (name TEXT PRIMARY KEY, accelerator TEXT NOT NULL, devices INTEGER NOT NULL,
		cpus INTEGER NOT NULL, memory_mb INTEGER NOT NULL);
	CREATE TABLE machines (id TEXT PRIMARY KEY, name TEXT NOT NULL, owner TEXT NOT NULL, region TEXT NOT NULL,
		os TEXT NOT NULL, arch TEXT NOT NULL, generation BIGINT NOT NULL, reported_generation BIGINT NOT NULL,
		applied_generation BIGINT NOT NULL, last_sync BIGINT NOT NULL, agent_version TEXT NOT NULL,
		boot_id TEXT NOT NULL, agent_started BIGINT NOT NULL, inventory TEXT NOT NULL, registered BIGINT NOT NULL,
		revoked BOOLEAN NOT NULL, cert_expires BIGINT NOT NULL);
	CREATE TABLE workloads (id TEXT PRIMARY KEY, name TEXT NOT NULL, tenant TEXT NOT NULL REFERENCES tenants (name),
		kind TEXT NOT NULL, class TEXT NOT NULL, region TEXT NOT NULL, image TEXT NOT NULL, state TEXT NOT NULL,
		machine TEXT NOT NULL, driver TEXT NOT NULL, devices TEXT NOT NULL, attempt BIGINT NOT NULL,
		mode_generation BIGINT NOT NULL, reason TEXT NOT NULL, created BIGINT NOT NULL, since BIGINT NOT NULL,
		progress BIGINT NOT NULL);
	CREATE INDEX workloads_machine ON workloads (machine);
	CREATE INDEX workloads_state ON workloads (state);
	CREATE TABLE statuses (machine TEXT NOT NULL, workload TEXT NOT NULL, attempt BIGINT NOT NULL, mode TEXT NOT NULL,
		generation BIGINT NOT NULL, code TEXT NOT NULL, exit_code BIGINT, detail TEXT NOT NULL, at BIGINT NOT NULL,
		PRIMARY KEY (machine, workload));
	CREATE TABLE timeline (seq {{serial}}, workload TEXT NOT NULL, at BIGINT NOT NULL, text TEXT NOT NULL);
	CREATE INDEX timeline_workload ON timeline (workload, seq);`,
	`CREATE TABLE tokens (hash TEXT PRIMARY KEY, owner TEXT NOT NULL, region TEXT NOT NULL, created BIGINT NOT NULL,
		expires BIGINT NOT NULL, used BIGINT NOT NULL);
	CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, epoch BIGINT NOT NULL, expires BIGINT NOT NULL);`,
	// Collapsed timeline lines (issue 14) and every certificate issued.
	`ALTER TABLE timeline ADD COLUMN kind TEXT NOT NULL DEFAULT '';
	ALTER TABLE timeline ADD COLUMN repeats BIGINT NOT NULL DEFAULT 1;
	ALTER TABLE timeline ADD COLUMN first_at BIGINT NOT NULL DEFAULT 0;
	CREATE TABLE certificates (serial TEXT PRIMARY KEY, machine TEXT NOT NULL, issued BIGINT NOT NULL,
		expires BIGINT NOT NULL, revoked BIGINT NOT NULL);
	CREATE INDEX certificates_machine ON certificates (machine, issued);`,
	`ALTER TABLE machines ADD COLUMN revoked_at BIGINT NOT NULL DEFAULT 0;`,
	// The controller pages through what waits in (created, id) order; a
	// backlog of 100,000 must not be sorted whole for each page.
	`CREATE INDEX workloads_waiting ON workloads (state, created);`,
	// Replicas publish their agents' URLs, so agents can move between
	// them (issue 18).
	`CREATE TABLE replicas (url TEXT PRIMARY KEY, seen BIGINT NOT NULL);`,
	// workloads_waiting, led by state, serves every query by state: an
	// index on state alone was one more to write at each state move, in
	// a burst of placements a sixth of each (issue 13).
	`DROP INDEX workloads_state;`,
	// Deleting a workload deletes its statuses, found by workload: without
	// an index each delete read every machine's statuses (issue 13). A
	// status is rewritten in place on each report, so the index is
	// written only when a workload's first status is.
	`CREATE INDEX statuses_workload ON statuses (workload);`,
	// Replicas publish how many polls they hold, so that one holding
	// more than its share sends some agents to the others (issue 13);
	// -1: a hub older than the count, whose row says nothing.
	`ALTER TABLE replicas ADD COLUMN polls BIGINT NOT NULL DEFAULT -1;`,
}

// migrationLock is the key of the advisory lock every migration
// transaction holds on PostgreSQL ("einsora" in ASCII), so that replicas
// starting at once apply each migration once, one after the other.
const migrationLock = 0x65696e736f7261

// beginMigration begins a migration transaction. On a Dollar (PostgreSQL)
// dialect it first waits for the advisory lock, released at commit or
// rollback; SQLite's single writer needs none.
func (s *Store) beginMigration(ctx context.Context) (*sql.Tx, error) {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if s.d.Dollar {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(`+strconv.Itoa(migrationLock)+`)`); err != nil {
			tx.Rollback()
			return nil, err
		}
	}
	return tx, nil
}

func (s *Store) migrate(ctx context.Context) error {
	// Even CREATE TABLE IF NOT EXISTS fails on PostgreSQL when two
	// sessions run it at once, so it too runs under the lock.
	tx, err := s.beginMigration(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)`); err != nil {
		tx.Rollback()
		return fmt.Errorf("migrate: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	serial := "INTEGER PRIMARY KEY AUTOINCREMENT"
	if s.d.Dollar {
		serial = "BIGSERIAL PRIMARY KEY"
	}
	for i, m := range migrations {
		version := i + 1
		tx, err := s.beginMigration(ctx)
		if err != nil {
			return fmt.Errorf("migrate %d: %w", version, err)
		}
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`), version).Scan(&n); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate %d: %w", version, err)
		}
		if n > 0 {
			tx.Rollback()
			continue
		}
		for stmt := range strings.SplitSeq(strings.ReplaceAll(m, "{{serial}}", serial), ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				tx.Rollback()
				return fmt.Errorf("migrate %d: %w", version, err)
			}
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO schema_migrations (version) VALUES (?)`), version); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate %d: %w", version, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate %d: %w", version, err)
		}
	}
	return s.migrateWorkloadSpec(ctx)
}
