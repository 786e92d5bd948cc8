package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/protocol"
)

func batchOf(n int, pad int) []adminapi.CreateWorkload {
	cws := make([]adminapi.CreateWorkload, n)
	for i := range cws {
		cws[i] = adminapi.CreateWorkload{Tenant: "local", Name: fmt.Sprintf("b-%d", i), Kind: "container", Class: "cpu-1", Region: "local", Image: "sim:",
			WorkloadSpec: protocol.WorkloadSpec{Env: map[string]string{"PAD": strings.Repeat("x", pad)}}}
	}
	return cws
}

// POST /v1/workloads/batch creates a batch in order, and takes a body
// larger than any other admin call may send, up to its own bound.
func TestAdminBatchCreate(t *testing.T) {
	h := newTestHub(t)
	h.machine("m1")
	_, c := adminServer(t, h)
	ctx := context.Background()

	// 200 workloads of 1 KiB each: over the 64 KiB of other admin bodies.
	cws := batchOf(200, 1<<10)
	out, err := c.CreateWorkloads(ctx, cws)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Workloads) != len(cws) {
		t.Fatalf("got %d workloads, want %d", len(out.Workloads), len(cws))
	}
	for i, w := range out.Workloads {
		if w.Name != cws[i].Name || w.State != "pending" || w.ID == "" {
			t.Fatalf("workload %d: got %s %s %q, want %s pending", i, w.ID, w.State, w.Name, cws[i].Name)
		}
	}
	if out.Warning != "" {
		t.Errorf("a led region warned %q", out.Warning)
	}

	// The single create keeps its own bound.
	_, err = c.CreateWorkload(ctx, batchOf(1, maxAdminBody)[0])
	if se, ok := err.(*adminapi.StatusError); !ok || se.Code != http.StatusBadRequest || !strings.Contains(se.Message, "over 65536 bytes") {
		t.Errorf("a single create over %d bytes: got %v, want 400 naming the bound", maxAdminBody, err)
	}
}

func TestAdminBatchCreateRefusals(t *testing.T) {
	h := newTestHub(t)
	h.machine("m1")
	srv, c := adminServer(t, h)
	ctx := context.Background()

	bad := batchOf(3, 0)
	bad[1].Class = "huge"
	_, err := c.CreateWorkloads(ctx, bad)
	if se, ok := err.(*adminapi.StatusError); !ok || se.Code != http.StatusBadRequest || !strings.Contains(se.Message, `workload 2 of 3 (b-1): invalid: no class "huge"`) {
		t.Errorf("a batch with an unknown class: got %v, want 400 naming workload 2", err)
	}
	if ws, err := c.Workloads(ctx); err != nil || len(ws) != 0 {
		t.Errorf("a refused batch left %d workloads (%v)", len(ws), err)
	}

	// Past its body bound: 413-style refusal in words, nothing created.
	// Each workload valid (a spec of 240 KiB, under protocol.MaxSpecBytes),
	// the whole over the bound.
	big := batchOf(40, 0)
	for i := range big {
		for range 60 {
			big[i].Command = append(big[i].Command, strings.Repeat("x", 4000))
		}
	}
	body, err := json.Marshal(adminapi.CreateWorkloads{Workloads: big})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+batchPath, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e adminapi.Error
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error, fmt.Sprintf("over %d bytes", adminapi.MaxBatchBody)) {
		t.Errorf("a batch body of %d bytes: got %d %q, want 400 naming the bound", len(body), resp.StatusCode, e.Error)
	}
	// Half of it is taken.
	if _, err := c.CreateWorkloads(ctx, big[:20]); err != nil {
		t.Errorf("a batch of %d bytes: %v", len(body)/2, err)
	}
	if ws, err := c.Workloads(ctx); err != nil || len(ws) != 20 {
		t.Errorf("after an oversized batch and one of 20: %d workloads (%v), want 20", len(ws), err)
	}
}

// The client's bound is the hub's, so the CLI never cuts a batch the hub
// refuses.
func TestBatchBoundsAgree(t *testing.T) {
	if adminapi.MaxCreateBatch != hub.MaxCreateBatch {
		t.Errorf("adminapi.MaxCreateBatch %d, hub.MaxCreateBatch %d", adminapi.MaxCreateBatch, hub.MaxCreateBatch)
	}
}
