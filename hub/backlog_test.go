package hub_test

import (
	"context"
	"path/filepath"
	"testing"

	"einsora.dev/edge/hub/hubtest"
	"einsora.dev/edge/hub/store/sqlite"
)

// A backlog of waiting workloads that fit nowhere delays neither the
// placement of one that fits nor the lease (issue 18).
func TestBacklogDelaysNeitherPlacementNorLease(t *testing.T) {
	n := 100_000
	if testing.Short() || raceEnabled {
		n = 3000
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hubtest.Backlog(t, st, n)
}
