package postgres

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
)

// BenchmarkUpdate measures Update throughput: one BumpGeneration per
// transaction, on SQLite (WAL, one writer) and on PostgreSQL
// (serialisable). serial is one caller; parallel is GOMAXPROCS×4 callers,
// each bumping a machine of its own, so PostgreSQL's transactions do not
// conflict and SQLite's queue for its writer.
func BenchmarkUpdate(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) store.Store
	}{
		{"sqlite", func(b *testing.B) store.Store {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "hub.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
		{"postgres", func(b *testing.B) store.Store { return open(b, testDSN(b)) }},
	}
	for _, st := range stores {
		b.Run(st.name+"/serial", func(b *testing.B) {
			s := st.open(b)
			ctx := context.Background()
			must(b, s.Update(ctx, func(tx store.Tx) error { return tx.PutMachine(store.Machine{ID: "m-0"}) }))
			for b.Loop() {
				must(b, s.Update(ctx, func(tx store.Tx) error { _, err := tx.BumpGeneration("m-0"); return err }))
			}
		})
		b.Run(st.name+"/parallel", func(b *testing.B) {
			s := st.open(b)
			ctx := context.Background()
			const machines = 256
			must(b, s.Update(ctx, func(tx store.Tx) error {
				for i := range machines {
					if err := tx.PutMachine(store.Machine{ID: fmt.Sprint("m-", i)}); err != nil {
						return err
					}
				}
				return nil
			}))
			var next atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				id := fmt.Sprint("m-", next.Add(1)%machines)
				for pb.Next() {
					if err := s.Update(ctx, func(tx store.Tx) error { _, err := tx.BumpGeneration(id); return err }); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
