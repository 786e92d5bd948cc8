package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/storetest"
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
