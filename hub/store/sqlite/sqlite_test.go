package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/storetest"
	"einsora.dev/edge/protocol"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestReopenKeepsIDAndData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hub.db")
	ctx := context.Background()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	id := s.ID()
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.CreateTenant(store.Tenant{Name: "acme"}) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ID() != id {
		t.Errorf("got store id %q after reopen, want %q", s.ID(), id)
	}
	if err := s.View(ctx, func(tx store.Tx) error { _, err := tx.Tenant("acme"); return err }); err != nil {
		t.Errorf("tenant after reopen: %v", err)
	}
}

// TestOldDatabaseUpgradesInPlace opens a database made before workloads had
// a spec: its workloads read as having none, and a spec can be stored.
func TestOldDatabaseUpgradesInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hub.db")
	ctx := context.Background()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Take the database back to before the spec migration, with one
	// workload written by an older hub.
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`ALTER TABLE workloads DROP COLUMN spec`,
		`ALTER TABLE workloads DROP COLUMN restarts`,
		`ALTER TABLE statuses DROP COLUMN restarts`,
		`DELETE FROM meta WHERE key = 'migration:workload_spec'`,
		`INSERT INTO tenants (name, created) VALUES ('acme', 0)`,
		`INSERT INTO workloads (id, name, tenant, kind, class, region, image, state, machine, driver, devices, attempt,
			mode_generation, reason, created, since, progress)
			VALUES ('w-old', 'web', 'acme', 'container', 'cpu-1', 'eu', 'nginx', 'running', 'm-1', 'sim', '[]', 2, 1, '', 0, 0, 0)`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	db.Close()

	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var w store.Workload
	if err := s.View(ctx, func(tx store.Tx) error { w, err = tx.Workload("w-old"); return err }); err != nil {
		t.Fatal(err)
	}
	if w.Image != "nginx" || w.Attempt != 2 || !reflect.DeepEqual(w.Spec, protocol.WorkloadSpec{}) {
		t.Fatalf("old workload after upgrade: %+v", w)
	}
	w.Spec.Env = map[string]string{"A": "b"}
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.PutWorkload(w) }); err != nil {
		t.Fatal(err)
	}
	if err := s.View(ctx, func(tx store.Tx) error { w, err = tx.Workload("w-old"); return err }); err != nil || w.Spec.Env["A"] != "b" {
		t.Fatalf("spec after upgrade: %+v, %v", w.Spec, err)
	}
}

// A hub older than replicas.polls writes its row without a count: it reads
// as -1, which no replica counts or sends agents to.
func TestReplicaRowOfAnOlderHubSaysNothing(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.writer.ExecContext(ctx, `INSERT INTO replicas (url, seen) VALUES ('https://old:1', 0)`); err != nil {
		t.Fatal(err)
	}
	var got []store.Replica
	if err := s.View(ctx, func(tx store.Tx) (err error) { got, err = tx.Replicas(time.Time{}, 10); return err }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Polls != -1 {
		t.Fatalf("an older hub's row reads %+v, want polls -1", got)
	}
}

// TestStatementJournalsStayInMemory: the savepoint of each Update that
// shares a commit journals the pages it first writes, and in a temp file
// those writes were a tenth of the store's CPU in a burst (issue 13).
// Every connection keeps them in memory.
func TestStatementJournalsStayInMemory(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const memory = 2 // PRAGMA temp_store: 0 default, 1 file, 2 memory
	for name, db := range map[string]*sql.DB{"writer": s.writer, "reader": s.reader} {
		var got int
		if err := db.QueryRow("PRAGMA temp_store").Scan(&got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != memory {
			t.Errorf("%s: temp_store is %d, want %d (memory)", name, got, memory)
		}
	}
}
