package httpapi

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

var epoch = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// testHub is a hub on a fresh SQLite store and a fake clock, with its HTTP
// surface.
type testHub struct {
	*hub.Hub
	api *API
	t   *testing.T
	clk *clock.Fake
	st  *sqlite.Store
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openTestHub(t *testing.T, authority *ca.CA, clk *clock.Fake) *testHub {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h, err := hub.New(context.Background(), hub.Config{AllowSim: true, Store: st, Clock: clk, CA: authority, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return &testHub{Hub: h, api: New(h, clk, quiet()), t: t, clk: clk, st: st}
}

func newTestHub(t *testing.T) *testHub {
	t.Helper()
	return openTestHub(t, nil, clock.NewFake(epoch))
}

// newEnrolHub is a test hub with a CA, tenants acme and other.
func newEnrolHub(t *testing.T) (*testHub, *ca.CA) {
	t.Helper()
	clk := clock.NewFake(epoch)
	authority, err := ca.Open(ca.Options{Dir: t.TempDir(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	h := openTestHub(t, authority, clk)
	for _, tn := range []string{"acme", "other"} {
		if err := h.CreateTenant(context.Background(), tn); err != nil {
			t.Fatal(err)
		}
	}
	return h, authority
}

// machine registers a machine of tenant local in region local and sends
// its first inventory.
func (h *testHub) machine(id string) {
	h.t.Helper()
	ctx := context.Background()
	if err := h.EnsureTenant(ctx, "local"); err != nil {
		h.t.Fatal(err)
	}
	if err := h.RegisterMachine(ctx, id, id, "local", "local"); err != nil {
		h.t.Fatal(err)
	}
	inv := &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 32768, Drivers: []string{"sim"}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := h.Sync(ctx, id, &protocol.SyncRequest{ProtocolVersion: protocol.Version, Inventory: inv}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *testHub) pass() {
	h.t.Helper()
	if err := h.Pass(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func (h *testHub) token(owner, region string, ttl time.Duration) protocol.Token {
	h.t.Helper()
	tok, _, err := h.CreateEnrollToken(context.Background(), owner, region, ttl)
	if err != nil {
		h.t.Fatal(err)
	}
	return tok
}

func (h *testHub) enrol(tok protocol.Token, machineID string, subject pkix.Name) (*protocol.CertificateResponse, error) {
	h.t.Helper()
	req, err := DecodeEnrollRequest(bytes.NewReader(enrolBody(h.t, tok, machineID, subject)))
	if err != nil {
		h.t.Fatal(err)
	}
	return h.Enroll(context.Background(), req)
}

func enrolBody(t testing.TB, tok protocol.Token, machineID string, subject pkix.Name) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	b, _ := json.Marshal(protocol.EnrollRequest{Token: tok.String(), CSR: csr, MachineID: machineID, Name: "box"})
	return b
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
