package hub_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/attacktest"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
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

// The hub itself refuses what it would store unprintable, whatever its
// caller (solo's in-process CLI included).
func TestCreateWorkloadRefusesUnprintableText(t *testing.T) {
	h := attacktest.New(t, openSQLite(t), hub.Config{})
	h.Machine("m-1")
	for _, spec := range []hub.WorkloadSpec{
		{Tenant: "local", Name: "web", Kind: protocol.KindContainer, Class: "cpu-1", Region: "local", Image: "sim:\x1b[2J"},
		{Tenant: "local", Name: "web", Kind: protocol.KindContainer, Class: "cpu-1", Region: "lo\u202ecal", Image: "sim:"},
	} {
		if _, err := h.CreateWorkload(context.Background(), spec); !errors.Is(err, hub.ErrInvalid) || strings.Contains(err.Error(), "\x1b") {
			t.Errorf("%+v: got %v, want ErrInvalid without the raw text", spec, err)
		}
	}
}
