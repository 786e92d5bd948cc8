package attacktest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Token makes an enrolment token of owner acme in region local.
func (h *Hub) Token() protocol.Token {
	h.T.Helper()
	tok, _, err := h.CreateEnrollToken(context.Background(), "acme", "local", time.Hour)
	if err != nil {
		h.T.Fatal(err)
	}
	return tok
}

// Enrol enrols machineID with tok and a new key; it returns the serial of
// the certificate issued.
func (h *Hub) Enrol(tok protocol.Token, machineID string) (serial string, err error) {
	h.T.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		h.T.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		h.T.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		h.T.Fatal(err)
	}
	resp, err := h.Enroll(context.Background(), &hub.EnrollRequest{Token: tok, CSR: csr, MachineID: machineID, Name: machineID})
	if err != nil {
		return "", err
	}
	block, _ := pem.Decode([]byte(resp.Certificate))
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		h.T.Fatal(err)
	}
	return ca.Serial(cert), nil
}

// The attack: another fresh token of the same owner re-enrols an online
// machine's ID. It is refused, naming the operator's way out; after
// `machine replace` the same token goes through and the old certificate is
// refused; revocation works by serial too.
func testTakeover(t *testing.T, st store.Store) {
	ctx := context.Background()
	h := NewEnrolling(t, st)
	first, err := h.Enrol(h.Token(), "m-1")
	if err != nil {
		t.Fatal(err)
	}
	h.Sync("m-1", &protocol.SyncRequest{Inventory: Inventory()})
	if err := h.CheckCertificate(ctx, "m-1", first); err != nil {
		t.Fatalf("the first certificate: %v", err)
	}

	stolen := h.Token()
	_, err = h.Enrol(stolen, "m-1")
	if !errors.Is(err, hub.ErrForbidden) || !strings.Contains(err.Error(), "einsora-hub machine replace m-1") {
		t.Fatalf("takeover with a fresh token of the same owner: got %v, want refused naming einsora-hub machine replace m-1", err)
	}
	if err := h.CheckCertificate(ctx, "m-1", first); err != nil {
		t.Errorf("a refused takeover harmed the holder: %v", err)
	}

	if err := h.ReplaceMachine(ctx, "m-1"); err != nil {
		t.Fatal(err)
	}
	if err := h.CheckCertificate(ctx, "m-1", first); !errors.Is(err, hub.ErrRevoked) {
		t.Errorf("the replaced certificate: got %v, want ErrRevoked", err)
	}
	// The refused enrolment left its token unused.
	h.Clock.Advance(time.Minute)
	second, err := h.Enrol(stolen, "m-1")
	if err != nil {
		t.Fatalf("enrolment after replace: %v", err)
	}
	if err := h.CheckCertificate(ctx, "m-1", second); err != nil {
		t.Errorf("the new certificate: %v", err)
	}
	if _, err := h.Enrol(h.Token(), "m-1"); !errors.Is(err, hub.ErrForbidden) {
		t.Errorf("a second enrolment after one replace: got %v, want refused", err)
	}
	m, err := h.Hub.Machine(ctx, "m-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Certificates) != 2 || m.Certificates[0].Serial != first || m.Certificates[0].Revoked.IsZero() ||
		m.Certificates[1].Serial != second || !m.Certificates[1].Revoked.IsZero() || !m.Certificates[1].Expires.After(h.Clock.Now()) {
		t.Errorf("machine show's certificates: %+v", m.Certificates)
	}

	// By serial: only that machine's, then that certificate alone.
	if err := h.RevokeCertificate(ctx, "m-2", second); !errors.Is(err, hub.ErrInvalid) {
		t.Errorf("revoking m-1's serial as m-2's: got %v, want ErrInvalid", err)
	}
	if err := h.RevokeCertificate(ctx, "", "ff"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoking an unknown serial: got %v, want ErrNotFound", err)
	}
	if err := h.RevokeCertificate(ctx, "m-1", second); err != nil {
		t.Fatal(err)
	}
	if err := h.CheckCertificate(ctx, "m-1", second); !errors.Is(err, hub.ErrRevoked) {
		t.Errorf("a certificate revoked by serial: got %v, want ErrRevoked", err)
	}
	// A serial the hub never issued to a machine whose serials it knows.
	if err := h.CheckCertificate(ctx, "m-1", "abc"); !errors.Is(err, hub.ErrRevoked) {
		t.Errorf("an unknown serial: got %v, want refused", err)
	}
	// With nothing live, the machine may enrol again.
	if _, err := h.Enrol(h.Token(), "m-1"); err != nil {
		t.Errorf("enrolment with every certificate revoked: %v", err)
	}
}

// A machine enrolled before serials were stored holds a certificate the hub
// has no serial of: it still blocks a takeover until it expires, and after
// replace no certificate without a record is honoured.
func testLegacyCertificate(t *testing.T, st store.Store) {
	ctx := context.Background()
	h := NewEnrolling(t, st)
	err := st.Update(ctx, func(tx store.Tx) error {
		return tx.PutMachine(store.Machine{ID: "m-old", Owner: "acme", Region: "local", Registered: Epoch, CertExpires: Epoch.Add(24 * time.Hour)})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.CheckCertificate(ctx, "m-old", "0a"); err != nil {
		t.Fatalf("the certificate of a machine with no serials on record: %v", err)
	}
	tok := h.Token()
	if _, err := h.Enrol(tok, "m-old"); !errors.Is(err, hub.ErrForbidden) {
		t.Fatalf("takeover of a machine with a live certificate of no serial: got %v, want refused", err)
	}
	if err := h.ReplaceMachine(ctx, "m-old"); err != nil {
		t.Fatal(err)
	}
	if err := h.CheckCertificate(ctx, "m-old", "0a"); !errors.Is(err, hub.ErrRevoked) {
		t.Errorf("the old certificate after replace: got %v, want refused", err)
	}
	serial, err := h.Enrol(tok, "m-old")
	if err != nil {
		t.Fatalf("enrolment after replace: %v", err)
	}
	if err := h.CheckCertificate(ctx, "m-old", serial); err != nil {
		t.Errorf("the new certificate: %v", err)
	}
}
