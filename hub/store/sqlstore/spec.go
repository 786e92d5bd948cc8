package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"

	"einsora.dev/edge/protocol"
)

// specMigration names the migration that gives workloads their spec. It is
// kept by name in meta rather than by number in migrations, so that it
// lands beside numbered migrations written in parallel without renumbering
// either.
const specMigration = "migration:workload_spec"

// migrateWorkloadSpec adds the spec column (JSON of protocol.WorkloadSpec,
// "" for none) and the restarts counts to workloads and statuses, once,
// under the migration lock. A hub with an
// older database upgrades in place: its workloads read as having no spec.
func (s *Store) migrateWorkloadSpec(ctx context.Context) error {
	tx, err := s.beginMigration(ctx)
	if err != nil {
		return fmt.Errorf("migrate workload spec: %w", err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM meta WHERE key = ?`), specMigration).Scan(&n); err != nil {
		return fmt.Errorf("migrate workload spec: %w", err)
	}
	if n > 0 {
		return nil
	}
	for _, stmt := range []string{
		`ALTER TABLE workloads ADD COLUMN spec TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE workloads ADD COLUMN restarts BIGINT NOT NULL DEFAULT 0`,
		`ALTER TABLE statuses ADD COLUMN restarts BIGINT NOT NULL DEFAULT 0`,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate workload spec: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO meta (key, value) VALUES (?, 'done')`), specMigration); err != nil {
		return fmt.Errorf("migrate workload spec: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate workload spec: %w", err)
	}
	return nil
}

// specColumn is the column's text for spec: "" for the zero spec, so rows
// without one stay as the migration left them.
func specColumn(spec protocol.WorkloadSpec) string {
	b, _ := json.Marshal(spec)
	if string(b) == "{}" {
		return ""
	}
	return string(b)
}

// readSpecColumn reads what specColumn wrote. It does not Validate: sealed
// secret values are the hub's to open, and the hub checked the spec before
// storing it.
func readSpecColumn(col string) (protocol.WorkloadSpec, error) {
	var spec protocol.WorkloadSpec
	if col == "" {
		return spec, nil
	}
	if err := json.Unmarshal([]byte(col), &spec); err != nil {
		return spec, fmt.Errorf("decode spec: %w", err)
	}
	return spec, nil
}
