package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
)

// BenchmarkStatementJournal times Updates that share commits, each in a
// savepoint of its own, which journals every page it first writes: two
// callers a CPU at once (four on 2 cores), each writing 500 workloads'
// records among 5,000 (an admit batch's most). The journal is in a temp file (SQLite's default)
// or in memory (the store's), in one run.
func BenchmarkStatementJournal(b *testing.B) {
	for _, where := range []string{"FILE", "MEMORY"} {
		b.Run("journal="+where, func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, filepath.Join(b.TempDir(), "hub.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			// The writer pool holds one connection, which keeps the
			// setting.
			if _, err := s.writer.ExecContext(ctx, "PRAGMA temp_store = "+where); err != nil {
				b.Fatal(err)
			}
			at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			ws := make([]store.Workload, 5000)
			err = s.Update(ctx, func(tx store.Tx) error {
				if err := tx.CreateTenant(store.Tenant{Name: "acme", Created: at}); err != nil {
					return err
				}
				for i := range ws {
					id := fmt.Sprint("w-", i)
					ws[i] = store.Workload{ID: id, Name: id, Tenant: "acme", Class: "small", Image: "registry.example/app:1", State: store.StateQueued, Created: at}
					if err := tx.CreateWorkload(ws[i]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism(2)
			b.RunParallel(func(pb *testing.PB) {
				batch := make([]store.Workload, 500)
				for pb.Next() {
					n := next.Add(1)
					from := int(n%10) * len(batch)
					copy(batch, ws[from:])
					for i := range batch {
						w := &batch[i]
						w.State, w.Machine, w.Attempt = store.StateProvisioning, fmt.Sprint("m-", i), n
						w.Since, w.Progress = at.Add(time.Duration(n)*time.Second), at
					}
					if err := s.Update(ctx, func(tx store.Tx) error { return tx.PutWorkloads(batch) }); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
