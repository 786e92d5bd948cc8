package hub_test

import (
	"context"
	"path/filepath"
	"testing"

	"einsora.dev/edge/hub/attacktest"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
)

func openSQLite(t testing.TB) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// The attacks of issue 14 on SQLite; hub/store/postgres runs them on
// PostgreSQL.
func TestAttacks(t *testing.T) {
	attacktest.Run(t, func(t *testing.T) store.Store { return openSQLite(t) })
}
