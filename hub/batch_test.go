package hub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

func batchSpecs(n int, name string) []WorkloadSpec {
	specs := make([]WorkloadSpec, n)
	for i := range specs {
		specs[i] = WorkloadSpec{Tenant: "local", Name: fmt.Sprintf("%s-%d", name, i), Kind: protocol.KindContainer, Class: "cpu-1", Region: "local", Image: "sim:",
			Spec: protocol.WorkloadSpec{Env: map[string]string{"N": fmt.Sprint(i)}}}
	}
	return specs
}

func TestCreateWorkloadsInOrderAndPlaced(t *testing.T) {
	h := newTestHub(t)
	h.machine("m1")
	specs := batchSpecs(3, "web")
	ws, err := h.CreateWorkloads(context.Background(), specs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 {
		t.Fatalf("got %d workloads, want 3", len(ws))
	}
	for i, w := range ws {
		got := h.workload(w.ID)
		if got.Name != specs[i].Name || got.State != store.StatePending || got.Spec.Env["N"] != fmt.Sprint(i) {
			t.Errorf("workload %d: stored %+v, want %s pending with N=%d", i, got, specs[i].Name, i)
		}
		if text := timelineText(t, h, w.ID); !strings.Contains(text, "created: container "+specs[i].Name) {
			t.Errorf("workload %d: timeline %q lacks its creation", i, text)
		}
	}
	h.pass()
	for _, w := range ws {
		wantState(t, h, w.ID, store.StateProvisioning)
	}
}

// A batch is one transaction: a workload refused late (its class does not
// exist, which only the store knows) leaves nothing of the others, and the
// error says which one it was.
func TestCreateWorkloadsAllOrNone(t *testing.T) {
	h := newTestHub(t)
	h.machine("m1")
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		spoil func(specs []WorkloadSpec)
		want  string
	}{
		{"class", func(s []WorkloadSpec) { s[2].Class = "huge" }, `workload 3 of 4 (bad-2): invalid: no class "huge"`},
		{"tenant", func(s []WorkloadSpec) { s[3].Tenant = "nobody" }, `workload 4 of 4 (bad-3): invalid: no tenant "nobody"`},
		{"name", func(s []WorkloadSpec) { s[1].Name = "Bad Name" }, `workload 2 of 4 (Bad Name): invalid: name "Bad Name"`},
		{"spec", func(s []WorkloadSpec) { s[0].Spec.Workdir = "relative" }, "workload 1 of 4 (bad-0): invalid:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			specs := batchSpecs(4, "bad")
			tt.spoil(specs)
			_, err := h.CreateWorkloads(ctx, specs)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ErrInvalid saying %q", err, tt.want)
			}
			if all, err := h.Workloads(ctx); err != nil || len(all) != 0 {
				t.Fatalf("after a refused batch the store holds %d workloads (%v), want none", len(all), err)
			}
		})
	}
}

func TestCreateWorkloadsBounded(t *testing.T) {
	h := newTestHub(t)
	h.machine("m1")
	ctx := context.Background()
	if _, err := h.CreateWorkloads(ctx, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("an empty batch: got %v, want ErrInvalid", err)
	}
	_, err := h.CreateWorkloads(ctx, batchSpecs(MaxCreateBatch+1, "big"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "at most 1000") {
		t.Errorf("a batch over the bound: got %v, want ErrInvalid naming the bound", err)
	}
	if ws, err := h.CreateWorkloads(ctx, batchSpecs(MaxCreateBatch, "full")); err != nil || len(ws) != MaxCreateBatch {
		t.Errorf("a batch at the bound: got %d workloads, %v", len(ws), err)
	}
}

// A single create is a batch of one, and its errors name no place.
func TestCreateWorkloadErrorNamesNoPlace(t *testing.T) {
	h := newTestHub(t)
	h.machine("m1")
	_, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: "x", Kind: protocol.KindContainer, Class: "huge", Region: "local"})
	if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "workload 1") {
		t.Errorf("got %v, want ErrInvalid without a place", err)
	}
}
