package drivers

import (
	"context"
	"slices"
	"testing"

	"einsora.dev/edge/protocol"
)

type named string

func (n named) Name() string                             { return string(n) }
func (n named) Isolation() protocol.Isolation            { return protocol.IsolationContainer }
func (n named) Start(context.Context, Spec) error        { return nil }
func (n named) Stop(context.Context, string) error       { return nil }
func (n named) Remove(context.Context, string) error     { return nil }
func (n named) List(context.Context) ([]Instance, error) { return nil, nil }

func names(ds []Driver) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Name())
	}
	return out
}

// The offered set changes while the drivers stay: a runtime comes and goes.
func TestHostOffer(t *testing.T) {
	h := NewHost(named("b"), named("a"))
	if got := names(h.Offered()); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("a new host offers %v, want every driver", got)
	}
	added, dropped := h.Offer("b", "nope")
	if len(added) != 0 || !slices.Equal(dropped, []string{"a"}) {
		t.Errorf("dropping a: added %v, dropped %v", added, dropped)
	}
	if h.IsOffered("a") || !h.IsOffered("b") || h.IsOffered("nope") {
		t.Errorf("offered: a %v, b %v, nope %v", h.IsOffered("a"), h.IsOffered("b"), h.IsOffered("nope"))
	}
	if _, ok := h.Get("a"); !ok || len(h.All()) != 2 {
		t.Error("a driver not offered is no longer held")
	}
	added, dropped = h.Offer("a", "b")
	if !slices.Equal(added, []string{"a"}) || len(dropped) != 0 {
		t.Errorf("adding a back: added %v, dropped %v", added, dropped)
	}
	if got := names(h.Offered()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("offered %v after adding a back", got)
	}
}
