package serve

import (
	"context"
	"path/filepath"
	"testing"

	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/store/sqlite"
)

// BusyNow is busyNow, for the tests of package serve_test.
func (s *Server) BusyNow() bool { return s.busyNow() }

// NewCAAndStore is a directory, a CA in it and a store on a SQLite file
// there, for the tests of both packages.
func NewCAAndStore(t *testing.T) (string, *ca.CA, *sqlite.Store) {
	t.Helper()
	dir := t.TempDir()
	authority, err := ca.Open(ca.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return dir, authority, st
}
