package sqlstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// BenchmarkDeleteWorkload times deleting one workload, with its status,
// among 1,000 and 10,000 machines that each hold one workload with a
// status, in one run: with its statuses found by an index, the cost does
// not grow with the fleet.
func BenchmarkDeleteWorkload(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint("statuses=", n), func(b *testing.B) {
			s := openSQLite(b)
			ctx := context.Background()
			at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			put := func(i int) error {
				return s.Update(ctx, func(tx store.Tx) error {
					id, machine := fmt.Sprint("w-", i), fmt.Sprint("m-", i%n)
					w := store.Workload{ID: id, Name: id, Tenant: "acme", State: store.StateRunning, Machine: machine, Created: at}
					if err := tx.CreateWorkload(w); err != nil {
						return err
					}
					return tx.PutStatus(store.StatusRecord{Machine: machine, Status: protocol.Status{Workload: id, Code: protocol.CodeRunning}, At: at})
				})
			}
			if err := s.Update(ctx, func(tx store.Tx) error { return tx.CreateTenant(store.Tenant{Name: "acme", Created: at}) }); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if err := put(i); err != nil {
					b.Fatal(err)
				}
			}
			i := n
			for b.Loop() {
				b.StopTimer()
				if err := put(i); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := s.Update(ctx, func(tx store.Tx) error { return tx.DeleteWorkload(fmt.Sprint("w-", i)) }); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
