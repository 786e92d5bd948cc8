package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"testing"
	"time"

	"einsora.dev/edge/protocol"
)

func TestRenewTimeIsSeventyPercentGiveOrTakeATenth(t *testing.T) {
	start := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: start, NotAfter: start.Add(100 * time.Hour)}
	for _, tt := range []struct {
		rand float64
		want time.Duration
	}{
		{0, 63 * time.Hour},
		{0.5, 70 * time.Hour},
		{1, 77 * time.Hour},
	} {
		n := &Network{rand: func() float64 { return tt.rand }}
		if got := n.renewTime(leaf).Sub(start); got.Round(time.Minute) != tt.want {
			t.Errorf("rand %v: renews after %s, want %s", tt.rand, got, tt.want)
		}
	}
}

type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newIssuer(t *testing.T) *issuer {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &issuer{cert: c, key: key}
}

func (is *issuer) issue(t *testing.T, pub *ecdsa.PublicKey, cn string) string {
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, is.cert, pub, is.key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func (is *issuer) pem() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: is.cert.Raw}))
}

// What the hub sends back is checked: the pinned CA, a certificate for
// this key, naming this machine.
func TestCheckIssuedRefuses(t *testing.T) {
	hub, other := newIssuer(t), newIssuer(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	fp := protocol.FingerprintOf(hub.cert.Raw)
	tests := []struct {
		name string
		resp protocol.CertificateResponse
	}{
		{"another_ca", protocol.CertificateResponse{CA: other.pem(), Certificate: other.issue(t, &key.PublicKey, "m-1")}},
		{"another_key", protocol.CertificateResponse{CA: hub.pem(), Certificate: hub.issue(t, &otherKey.PublicKey, "m-1")}},
		{"another_machine", protocol.CertificateResponse{CA: hub.pem(), Certificate: hub.issue(t, &key.PublicKey, "m-2")}},
		{"not_from_the_ca", protocol.CertificateResponse{CA: hub.pem(), Certificate: other.issue(t, &key.PublicKey, "m-1")}},
		{"garbage", protocol.CertificateResponse{CA: hub.pem(), Certificate: "nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := checkIssued(&tt.resp, key, "m-1", fp); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	good := protocol.CertificateResponse{CA: hub.pem(), Certificate: hub.issue(t, &key.PublicKey, "m-1")}
	if _, _, err := checkIssued(&good, key, "m-1", fp); err != nil {
		t.Errorf("good answer refused: %v", err)
	}
}

// Enrolment takes the state directory's lock: it never races a running
// agent, and it checks that before it contacts any hub.
func TestEnrollRefusesWhileAnAgentRuns(t *testing.T) {
	dir := t.TempDir()
	lock, err := lockState(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	var tok protocol.Token
	_, err = Enroll(context.Background(), EnrollOptions{StateDir: dir, HubURL: "https://127.0.0.1:1", Token: tok.String()})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("got %v, want ErrLocked", err)
	}
}

func TestOpenNetworkNotEnrolled(t *testing.T) {
	if _, err := OpenNetwork(t.TempDir(), NetworkOptions{}); !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("got %v, want ErrNotEnrolled", err)
	}
}
