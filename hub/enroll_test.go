package hub

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/store"
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
	h, err := New(context.Background(), Config{Store: st, Clock: clk, CA: authority, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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

func enrolBody(t testing.TB, tok protocol.Token, machineID string, subject pkix.Name) []byte {
	_, csr := newCSRPEM(t, subject)
	b, _ := json.Marshal(protocol.EnrollRequest{Token: tok.String(), CSR: csr, MachineID: machineID, Name: "box"})
	return b
}

func (h *testHub) enrol(tok protocol.Token, machineID string, subject pkix.Name) (*protocol.CertificateResponse, error) {
	h.t.Helper()
	req, err := DecodeEnrollRequest(bytes.NewReader(enrolBody(h.t, tok, machineID, subject)))
	if err != nil {
		h.t.Fatal(err)
	}
	return h.Enroll(context.Background(), req)
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

func TestIdentifyClientCert(t *testing.T) {
	h, _ := newEnrolHub(t)
	resp, err := h.enrol(h.token("acme", "r1", time.Hour), "m-1", pkix.Name{})
	if err != nil {
		t.Fatal(err)
	}
	leaf := parseLeaf(t, resp.Certificate)
	r := httptest.NewRequest(http.MethodPost, protocol.SyncPath, nil)
	if _, err := h.IdentifyClientCert(r); err == nil || !strings.Contains(err.Error(), "einsora-agent enroll") {
		t.Errorf("no TLS: got %v", err)
	}
	r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
	if id, err := h.IdentifyClientCert(r); err != nil || id != "m-1" {
		t.Errorf("got %q, %v", id, err)
	}
	h.clk.Advance(ca.DefaultClientLifetime + time.Second)
	if _, err := h.IdentifyClientCert(r); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired while connected: got %v", err)
	}
}

func TestAdminTokensAndRevoke(t *testing.T) {
	h, authority := newEnrolHub(t)
	srv := httptest.NewServer(h.AdminHandler("secret"))
	t.Cleanup(srv.Close)
	c := &adminapi.Client{BaseURL: srv.URL, Token: "secret"}
	ctx := context.Background()
	got, err := c.CreateToken(ctx, "acme", "r1", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := protocol.ParseToken(got.Token)
	if err != nil || tok.Fingerprint != authority.Fingerprint() || got.Owner != "acme" || !got.Expires.Equal(epoch.Add(2*time.Hour)) {
		t.Fatalf("token %+v (%v)", got, err)
	}
	// The store holds the hash, not the secret.
	h.st.View(ctx, func(tx store.Tx) error {
		if _, err := tx.UseToken(tok.String(), epoch); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("token found by its plain text: %v", err)
		}
		return errors.New("roll back")
	})
	if _, err := c.CreateToken(ctx, "nobody", "r1", time.Hour); err == nil || !strings.Contains(err.Error(), "tenant create") {
		t.Errorf("token for an unknown owner: %v", err)
	}
	if _, err := h.enrol(tok, "m-1", pkix.Name{}); err != nil {
		t.Fatal(err)
	}
	if err := c.RevokeMachine(ctx, "m-1"); err != nil {
		t.Fatal(err)
	}
	if m, _ := c.Machine(ctx, "m-1"); m.CertExpires == nil {
		t.Error("machine show lacks cert_expires")
	}
	if err := c.RevokeMachine(ctx, "m-none"); !adminapi.NotFound(err) {
		t.Errorf("revoke unknown: %v", err)
	}
}

func TestEnrollHandlerAnswers(t *testing.T) {
	h, _ := newEnrolHub(t)
	srv := httptest.NewServer(h.EnrollHandler())
	t.Cleanup(srv.Close)
	tok := h.token("acme", "r1", time.Hour)
	tests := []struct {
		name string
		body []byte
		want int
	}{
		{"valid", enrolBody(t, tok, "m-1", pkix.Name{}), http.StatusOK},
		{"reused", enrolBody(t, tok, "m-2", pkix.Name{}), http.StatusUnauthorized},
		{"malformed", []byte(`{"token":"est1.x"}`), http.StatusBadRequest},
		{"oversized", []byte(`{"name":"` + strings.Repeat("x", protocol.MaxEnrollBody) + `"}`), http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.want {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("got %d %s, want %d", resp.StatusCode, b, tt.want)
			}
			if tt.want != http.StatusOK {
				var e adminapi.Error
				if json.NewDecoder(resp.Body).Decode(&e); e.Error == "" || strings.Contains(e.Error, "\n") {
					t.Errorf("want a one-line message, got %q", e.Error)
				}
			}
		})
	}
}

// FuzzDecodeEnrollRequest: no body makes the decoder panic, and whatever it
// accepts has a well-formed token, a valid machine ID and a CSR for an
// ECDSA P-256 key whose signature checks.
func FuzzDecodeEnrollRequest(f *testing.F) {
	var tok protocol.Token
	tok.Secret[0] = 1
	f.Add(enrolBody(f, tok, "m-1", pkix.Name{CommonName: "m-1"}))
	f.Add([]byte(`{"token":"est1.AAAA.BBBB","csr":"","machine_id":"m-1"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeEnrollRequest(bytes.NewReader(b))
		if err != nil {
			return
		}
		if _, err := protocol.ParseToken(req.Token.String()); err != nil {
			t.Fatalf("accepted a token that does not parse back: %v", err)
		}
		if err := ca.CheckMachineID(req.MachineID); err != nil {
			t.Fatalf("accepted machine id: %v", err)
		}
		if err := ca.CheckCSR(req.CSR); err != nil {
			t.Fatalf("accepted CSR: %v", err)
		}
		if len(req.Name) > 64 {
			t.Fatalf("name of %d bytes", len(req.Name))
		}
	})
}
