package sqlstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
)

// batchFixture fills a store with n machines and n workloads, one on each.
func batchFixture(t testing.TB, s *Store, n int) []store.Workload {
	t.Helper()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var ws []store.Workload
	err := s.Update(context.Background(), func(tx store.Tx) error {
		if err := tx.CreateTenant(store.Tenant{Name: "acme", Created: at}); err != nil {
			return err
		}
		for i := range n {
			id := fmt.Sprintf("%04d", i)
			if err := tx.PutMachine(store.Machine{ID: "m-" + id, Name: "box", Owner: "acme", Region: "eu", Registered: at}); err != nil {
				return err
			}
			w := store.Workload{ID: "w-" + id, Name: "web-" + id, Tenant: "acme", Class: "cpu-1", Region: "eu", State: store.StatePending, Created: at}
			if err := tx.CreateWorkload(w); err != nil {
				return err
			}
			ws = append(ws, w)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// placeAll writes ws placed, each on its own machine: together, or one
// workload and one machine a statement.
func placeAll(s *Store, ws []store.Workload, together bool) error {
	return s.Update(context.Background(), func(tx store.Tx) error {
		if together {
			bumps := make([]store.Bump, len(ws))
			for i, w := range ws {
				bumps[i] = store.Bump{Machine: "m-" + w.ID[2:], By: 1}
			}
			if _, err := tx.BumpMachines(bumps); err != nil {
				return err
			}
			return tx.PutWorkloads(ws)
		}
		for _, w := range ws {
			if _, err := tx.BumpGeneration("m-" + w.ID[2:]); err != nil {
				return err
			}
			if err := tx.PutWorkload(w); err != nil {
				return err
			}
		}
		return nil
	})
}

// The writes of many rows are kept prepared like any other statement,
// however they begin (WITH).
func TestWritesOfManyRowsStayPrepared(t *testing.T) {
	s := openSQLite(t)
	ws := batchFixture(t, s, rowsPerStatement)
	for range 2 {
		if err := placeAll(s, ws, true); err != nil {
			t.Fatal(err)
		}
	}
	c := s.stmts[s.writer]
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, q := range map[string]string{"PutWorkloads": putWorkloadsQueries[rowsPerStatement], "BumpMachines": bumpMachinesQueries[rowsPerStatement]} {
		if c.ready[q] == nil {
			t.Errorf("%s of %d rows: not prepared after two transactions", name, rowsPerStatement)
		}
	}
}

// BenchmarkPlacementWrites times writing a batch of placements, each on
// its own machine of 1,000 (a machine's bump and a workload's record), one
// workload and one machine a statement against several a statement.
func BenchmarkPlacementWrites(b *testing.B) {
	for _, batch := range []int{64, 1000} {
		for _, together := range []bool{false, true} {
			b.Run(fmt.Sprintf("batch=%d/together=%t", batch, together), func(b *testing.B) {
				s := openSQLite(b)
				ws := batchFixture(b, s, 1000)[:batch]
				for b.Loop() {
					if err := placeAll(s, ws, together); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "µs/placement")
			})
		}
	}
}
