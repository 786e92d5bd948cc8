package httpapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/protocol"
)

// A certificate replaced or revoked while its connection stays open is
// refused on its next request, 403 with "revoked" (which the agent reads),
// and the admin API replaces, revokes by serial and lists certificates.
func TestReplacedCertificateRefusedOnEveryRequest(t *testing.T) {
	h, _ := newEnrolHub(t)
	srv := httptest.NewServer(h.api.AdminHandler("secret"))
	t.Cleanup(srv.Close)
	c := &adminapi.Client{BaseURL: srv.URL, Token: "secret"}
	ctx := context.Background()

	resp, err := h.enrol(h.token("acme", "r1", time.Hour), "m-1", pkix.Name{})
	if err != nil {
		t.Fatal(err)
	}
	leaf := parseLeaf(t, resp.Certificate)
	renew := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, protocol.RenewPath, strings.NewReader("{}"))
		r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
		rec := httptest.NewRecorder()
		h.api.RenewHandler(h.api.IdentifyClientCert).ServeHTTP(rec, r)
		return rec
	}
	if rec := renew(); rec.Code == http.StatusForbidden || rec.Code == http.StatusUnauthorized {
		t.Fatalf("a live certificate: %d %s", rec.Code, rec.Body)
	}

	if _, err := h.enrol(h.token("acme", "r1", time.Hour), "m-1", pkix.Name{}); err == nil {
		t.Fatal("a second enrolment of a machine with a live certificate went through")
	}
	if err := c.ReplaceMachine(ctx, "m-1"); err != nil {
		t.Fatal(err)
	}
	rec := renew()
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "revoked") || !strings.Contains(rec.Body.String(), "einsora-agent enroll") {
		t.Errorf("a replaced certificate on an open connection: %d %s, want 403 revoked", rec.Code, rec.Body)
	}
	h.clk.Advance(time.Minute)
	again, err := h.enrol(h.token("acme", "r1", time.Hour), "m-1", pkix.Name{})
	if err != nil {
		t.Fatalf("enrolment after replace: %v", err)
	}
	serial := ca.Serial(parseLeaf(t, again.Certificate))

	m, err := c.Machine(ctx, "m-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Certificates) != 2 || m.Certificates[0].Serial != ca.Serial(leaf) || m.Certificates[0].Revoked == nil || m.Certificates[1].Revoked != nil {
		t.Errorf("machine show lists %+v", m.Certificates)
	}
	if err := c.RevokeCertificate(ctx, "m-2", serial); err == nil {
		t.Error("revoking m-1's serial under m-2 went through")
	}
	if err := c.RevokeCertificate(ctx, "m-1", serial); err != nil {
		t.Fatal(err)
	}
	if err := h.CheckCertificate(ctx, "m-1", serial); !errors.Is(err, hub.ErrRevoked) {
		t.Errorf("revoked by machine and serial: %v", err)
	}
	third, err := h.enrol(h.token("acme", "r1", time.Hour), "m-1", pkix.Name{})
	if err != nil {
		t.Fatal(err)
	}
	serial = ca.Serial(parseLeaf(t, third.Certificate))
	if err := c.RevokeCertificate(ctx, "", serial); err != nil {
		t.Fatal(err)
	}
	if err := h.CheckCertificate(ctx, "m-1", serial); !errors.Is(err, hub.ErrRevoked) {
		t.Errorf("revoked by serial alone: %v", err)
	}
}

// The admin API shows the hub's counters of dropped statuses.
func TestCountersShowDroppedStatuses(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	if _, err := h.Sync(context.Background(), "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version,
		Statuses: []protocol.Status{{Workload: "made-up", Code: protocol.CodeRunning}}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.api.AdminHandler("secret"))
	t.Cleanup(srv.Close)
	c, err := (&adminapi.Client{BaseURL: srv.URL, Token: "secret"}).Counters(context.Background())
	if err != nil || c.DroppedStatuses != 1 {
		t.Errorf("counters %+v (%v), want one dropped status", c, err)
	}
}

// The counters say how many polls the hub holds now, as the gauge does.
func TestCountersSayTheHeldPolls(t *testing.T) {
	h := newTestHub(t)
	h.machine("m1")
	_, c := adminServer(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := h.Sync(ctx, "m1", &protocol.SyncRequest{ProtocolVersion: protocol.Version})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Nothing new for it: the hub holds the poll.
		h.Sync(ctx, "m1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, Generation: first.Generation,
			AppliedGeneration: first.Generation, StoreID: first.StoreID})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for h.WaitingPolls() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the poll was not held")
		}
		time.Sleep(time.Millisecond)
	}
	got, err := c.Counters(context.Background())
	if err != nil || got.LongPolls != 1 {
		t.Errorf("with one poll held: long_polls %d, %v; want 1", got.LongPolls, err)
	}
	cancel()
	<-done
	if got, err := c.Counters(context.Background()); err != nil || got.LongPolls != 0 {
		t.Errorf("with none held: long_polls %d, %v; want 0", got.LongPolls, err)
	}
}
