package hub

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

// newEnrolHub is a test hub with a CA, tenants acme and other.
func newEnrolHub(t *testing.T) (*testHub, *ca.CA) {
	t.Helper()
	clk := clock.NewFake(epoch)
	authority, err := ca.Open(ca.Options{Dir: t.TempDir(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "hub.db")
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h, err := New(context.Background(), Config{AllowSim: true, Store: st, Clock: clk, CA: authority, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{"acme", "other"} {
		if err := h.CreateTenant(context.Background(), tn); err != nil {
			t.Fatal(err)
		}
	}
	return &testHub{Hub: h, t: t, clk: clk, path: path, st: st}, authority
}

func (h *testHub) token(owner, region string, ttl time.Duration) protocol.Token {
	h.t.Helper()
	tok, _, err := h.CreateEnrollToken(context.Background(), owner, region, ttl)
	if err != nil {
		h.t.Fatal(err)
	}
	return tok
}

func newCSRPEM(t testing.TB, subject pkix.Name) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject}, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

func (h *testHub) enrol(tok protocol.Token, machineID string, subject pkix.Name) (*protocol.CertificateResponse, error) {
	h.t.Helper()
	_, csrPEM := newCSRPEM(h.t, subject)
	csr, err := ca.ParseCSR(csrPEM)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.Enroll(context.Background(), &EnrollRequest{Token: tok, CSR: csr, MachineID: machineID, Name: "box"})
}

func parseLeaf(t *testing.T, s string) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode([]byte(s))
	if b == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Owner and region come from the token alone: a CSR that claims others is
// signed for the token's, and names the machine it enrols.
func TestEnrollTakesOwnerAndRegionFromTheTokenAlone(t *testing.T) {
	h, authority := newEnrolHub(t)
	tok := h.token("acme", "eu-1", time.Hour)
	resp, err := h.enrol(tok, "m-1", pkix.Name{CommonName: "m-other", Organization: []string{"other"}, OrganizationalUnit: []string{"us-9"}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Owner != "acme" || resp.Region != "eu-1" || resp.MachineID != "m-1" {
		t.Errorf("answered %s/%s/%s, want m-1 of acme in eu-1", resp.MachineID, resp.Owner, resp.Region)
	}
	leaf := parseLeaf(t, resp.Certificate)
	if id, err := ca.MachineID(leaf); err != nil || id != "m-1" || len(leaf.Subject.Organization) != 0 {
		t.Errorf("certificate names %q (%v), subject %v", id, err, leaf.Subject)
	}
	if string(authority.CertificatePEM()) != resp.CA {
		t.Error("answer does not carry the CA")
	}
	m, err := h.Machine(context.Background(), "m-1")
	if err != nil {
		t.Fatal(err)
	}
	if m.Owner != "acme" || m.Region != "eu-1" || m.Name != "box" || !m.CertExpires.Equal(leaf.NotAfter) {
		t.Errorf("stored machine %+v", m.Machine)
	}
}

func TestEnrollRefuses(t *testing.T) {
	h, _ := newEnrolHub(t)
	used := h.token("acme", "r1", time.Hour)
	if _, err := h.enrol(used, "m-first", pkix.Name{}); err != nil {
		t.Fatal(err)
	}
	expired := h.token("acme", "r1", time.Minute)
	h.clk.Advance(2 * time.Minute)

	otherHub, _ := newEnrolHub(t)
	foreign := otherHub.token("acme", "r1", time.Hour)

	unknown := h.token("acme", "r1", time.Hour)
	unknown.Secret[0] ^= 1

	if err := h.RegisterMachine(context.Background(), "m-owned", "x", "other", "r1"); err != nil {
		t.Fatal(err)
	}
	if err := h.RegisterMachine(context.Background(), "m-revoked", "x", "acme", "r1"); err != nil {
		t.Fatal(err)
	}
	if err := h.RevokeMachine(context.Background(), "m-revoked"); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		tok     protocol.Token
		machine string
		want    error
		says    string
	}{
		{"token_reused", used, "m-second", ErrTokenRefused, "used before"},
		{"token_expired", expired, "m-2", ErrTokenRefused, "expired"},
		{"token_of_another_hub", foreign, "m-2", ErrTokenRefused, "another hub"},
		{"token_unknown", unknown, "m-2", ErrTokenRefused, "does not know"},
		{"machine_of_another_owner", h.token("acme", "r1", time.Hour), "m-owned", ErrForbidden, "belongs to other"},
		{"machine_revoked", h.token("acme", "r1", time.Hour), "m-revoked", ErrForbidden, "revoked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.enrol(tt.tok, tt.machine, pkix.Name{})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("got %v, want %v saying %q", err, tt.want, tt.says)
			}
		})
	}
	// A refused enrolment leaves its token unused.
	tok := h.token("acme", "r1", time.Hour)
	if _, err := h.enrol(tok, "m-owned", pkix.Name{}); !errors.Is(err, ErrForbidden) {
		t.Fatal(err)
	}
	if _, err := h.enrol(tok, "m-fresh", pkix.Name{}); err != nil {
		t.Errorf("token unusable after a refused enrolment: %v", err)
	}
}

func TestCreateEnrollTokenRefuses(t *testing.T) {
	h, _ := newEnrolHub(t)
	for _, tt := range []struct {
		name, owner, region string
		ttl                 time.Duration
	}{
		{"unknown_owner", "nobody", "r1", time.Hour},
		{"bad_region", "acme", "Not A Region", time.Hour},
		{"ttl_too_short", "acme", "r1", time.Second},
		{"ttl_too_long", "acme", "r1", 365 * 24 * time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := h.CreateEnrollToken(context.Background(), tt.owner, tt.region, tt.ttl); !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
	solo := newTestHub(t)
	if _, _, err := solo.CreateEnrollToken(context.Background(), "local", "local", time.Hour); !errors.Is(err, ErrNoCA) {
		t.Errorf("hub without CA: got %v", err)
	}
}

func TestRenewKeepsOwnerAndMovesExpiry(t *testing.T) {
	h, _ := newEnrolHub(t)
	first, err := h.enrol(h.token("acme", "r1", time.Hour), "m-1", pkix.Name{})
	if err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(24 * time.Hour)
	_, csr := newCSRPEM(t, pkix.Name{CommonName: "m-2", Organization: []string{"other"}})
	parsed, err := ca.ParseCSR(csr)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.Renew(context.Background(), "m-1", parsed)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Expires.After(first.Expires) || resp.Owner != "acme" {
		t.Errorf("renewed: %+v", resp)
	}
	if id, _ := ca.MachineID(parseLeaf(t, resp.Certificate)); id != "m-1" {
		t.Errorf("renewed certificate names %q", id)
	}
	if err := h.RevokeMachine(context.Background(), "m-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Renew(context.Background(), "m-1", parsed); !errors.Is(err, ErrRevoked) {
		t.Errorf("renew of a revoked machine: got %v", err)
	}
	if _, err := h.Renew(context.Background(), "m-none", parsed); !errors.Is(err, ErrUnknownMachine) {
		t.Errorf("renew of an unknown machine: got %v", err)
	}
}

// Revoking a machine ends its waiting long poll at once.
func TestRevokeEndsTheWaitingPoll(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	d := h.desired("m-1")
	got := make(chan error, 1)
	go func() {
		_, err := h.Sync(context.Background(), "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: d.StoreID, Generation: d.Generation})
		got <- err
	}()
	waitTimers(t, h.clk, 1)
	if err := h.RevokeMachine(context.Background(), "m-1"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ErrRevoked) {
			t.Fatalf("got %v, want ErrRevoked", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the poll kept waiting after the revocation")
	}
	if _, err := h.Sync(context.Background(), "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version}); !errors.Is(err, ErrRevoked) {
		t.Errorf("next sync: got %v", err)
	}
	if err := h.CheckMachine(context.Background(), "m-1"); !errors.Is(err, ErrRevoked) {
		t.Errorf("CheckMachine: got %v", err)
	}
}

// One waiting poll per machine: a new one replaces the old, which is
// answered at once.
func TestNewPollReplacesTheWaitingOne(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	d := h.desired("m-1")
	req := func() *protocol.SyncRequest {
		return &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: d.StoreID, Generation: d.Generation}
	}
	first := make(chan error, 1)
	go func() { _, err := h.Sync(context.Background(), "m-1", req()); first <- err }()
	waitTimers(t, h.clk, 1)
	second := make(chan *protocol.SyncResponse, 1)
	go func() { resp, _ := h.Sync(context.Background(), "m-1", req()); second <- resp }()
	select {
	case err := <-first:
		if !errors.Is(err, ErrSuperseded) {
			t.Fatalf("old poll: got %v, want ErrSuperseded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the old poll kept waiting")
	}
	waitTimers(t, h.clk, 1)
	for deadline := time.Now().Add(5 * time.Second); h.WaitingPolls() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d polls waiting, want 1", h.WaitingPolls())
		}
	}
	h.clk.Advance(DefaultPollTimeout)
	if resp := <-second; resp == nil || !resp.Unchanged {
		t.Errorf("new poll: got %+v, want unchanged at the timeout", resp)
	}
}
