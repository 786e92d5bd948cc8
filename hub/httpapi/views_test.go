package httpapi

import (
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/hub/adminapi"
)

// The admin API tells the truth: a revoked machine is never online, a
// sim machine says so, and a workload on an offline machine is unknown
// since the machine went silent, its stored state kept apart.
func TestAdminFieldsTellTheTruth(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	h.machine("m-2")
	_, c := adminServer(t, h)
	ctx := t.Context()
	w, err := c.CreateWorkload(ctx, adminapi.CreateWorkload{Tenant: "local", Name: "web", Kind: "container", Class: "cpu-1", Region: "local"})
	if err != nil {
		t.Fatal(err)
	}
	h.pass()
	got, err := c.Workload(ctx, w.ID)
	if err != nil || got.State != "provisioning" || got.UnknownSince != nil {
		t.Fatalf("online: got %+v, %v; want provisioning, known", got, err)
	}
	placed := got.Machine
	other := map[string]string{"m-1": "m-2", "m-2": "m-1"}[placed]

	// Revoked a moment after its last sync, a machine is not online.
	if err := c.RevokeMachine(ctx, other); err != nil {
		t.Fatal(err)
	}
	m, err := c.Machine(ctx, other)
	if err != nil || m.Online || !m.Revoked || m.RevokedAt == nil || !m.RevokedAt.Equal(epoch) || !m.Sim {
		t.Fatalf("revoked machine: got %+v, %v", m, err)
	}

	h.clk.Advance(time.Minute)
	got, err = c.Workload(ctx, w.ID)
	if err != nil || got.State != "provisioning" || got.UnknownSince == nil || !got.UnknownSince.Equal(epoch) {
		t.Fatalf("offline: got %+v, %v; want provisioning, unknown since %s", got, err, epoch)
	}
	ws, err := c.Workloads(ctx)
	if err != nil || len(ws) != 1 || ws[0].UnknownSince == nil || !ws[0].UnknownSince.Equal(epoch) {
		t.Fatalf("list: got %+v, %v", ws, err)
	}
	ms, err := c.Machines(ctx)
	if err != nil || len(ms) != 2 {
		t.Fatalf("machines: got %+v, %v", ms, err)
	}
	for _, m := range ms {
		if m.Online || m.OfflineSince == nil || !m.Sim || m.Revoked != (m.ID == other) {
			t.Errorf("machine %s: got %+v", m.ID, m)
		}
	}
}

// Creating a workload or a token for a region no hub leads warns; for the
// hub's own region it does not.
func TestUnledRegionWarns(t *testing.T) {
	h, _ := newEnrolHub(t)
	_, c := adminServer(t, h)
	ctx := t.Context()
	for region, warns := range map[string]bool{"local": false, "asia": true} {
		w, err := c.CreateWorkload(ctx, adminapi.CreateWorkload{Tenant: "acme", Name: "w-" + region, Kind: "container", Class: "cpu-1", Region: region})
		if err != nil {
			t.Fatal(err)
		}
		if (w.Warning != "") != warns || warns && !strings.Contains(w.Warning, "region "+region) {
			t.Errorf("workload in %s: warning %q", region, w.Warning)
		}
		tok, err := c.CreateToken(ctx, "acme", region, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if (tok.Warning != "") != warns {
			t.Errorf("token for %s: warning %q", region, tok.Warning)
		}
	}
	if w, err := c.Workloads(ctx); err != nil || len(w) != 2 || w[0].Warning != "" {
		t.Errorf("listed workloads carry a warning: %+v, %v", w, err)
	}
}
