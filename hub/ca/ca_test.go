package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/protocol"
)

var epoch = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func openCA(t *testing.T, dir string, clk clock.Clock) *CA {
	t.Helper()
	c, err := Open(Options{Dir: dir, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func csrFor(t *testing.T, key any, tmpl *x509.CertificateRequest) *x509.CertificateRequest {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

func p256(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestOpenCreatesOnceWithPrivateKey(t *testing.T) {
	dir := t.TempDir()
	c := openCA(t, dir, clock.NewFake(epoch))
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", st.Mode().Perm())
	}
	cert := c.Certificate()
	if !cert.IsCA || cert.PublicKeyAlgorithm != x509.ECDSA || cert.PublicKey.(*ecdsa.PublicKey).Curve != elliptic.P256() {
		t.Errorf("CA certificate: IsCA %v, key %v", cert.IsCA, cert.PublicKeyAlgorithm)
	}
	again := openCA(t, dir, clock.NewFake(epoch))
	if again.Fingerprint() != c.Fingerprint() {
		t.Error("reopening made a new CA")
	}
	if !protocol.FingerprintMatches(cert.Raw, c.Fingerprint()) {
		t.Error("fingerprint is not the SHA-256 of the certificate")
	}
}

func TestOpenRefusesHalfACA(t *testing.T) {
	dir := t.TempDir()
	openCA(t, dir, clock.NewFake(epoch))
	os.Remove(filepath.Join(dir, KeyFile))
	if _, err := Open(Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "backup") {
		t.Fatalf("got %v, want a refusal that says to restore from a backup", err)
	}
}

// Whatever the CSR claims is ignored: the certificate names the machine the
// hub decided on, for client authentication only.
func TestSignMachineIgnoresWhatTheCSRClaims(t *testing.T) {
	clk := clock.NewFake(epoch)
	c := openCA(t, t.TempDir(), clk)
	evil, _ := url.Parse("einsora:machine:m-victim")
	csr := csrFor(t, p256(t), &x509.CertificateRequest{
		Subject:        pkix.Name{CommonName: "m-victim", Organization: []string{"other-tenant"}, OrganizationalUnit: []string{"other-region"}},
		DNSNames:       []string{"hub.example.com"},
		EmailAddresses: []string{"x@example.com"},
		URIs:           []*url.URL{evil},
	})
	certPEM, notAfter, err := c.SignMachine(csr, "m-1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "m-1" || len(cert.Subject.Organization) != 0 || len(cert.Subject.OrganizationalUnit) != 0 {
		t.Errorf("subject %v, want CN=m-1 alone", cert.Subject)
	}
	if len(cert.DNSNames) != 0 || len(cert.EmailAddresses) != 0 || len(cert.URIs) != 1 || cert.URIs[0].String() != "einsora:machine:m-1" {
		t.Errorf("SANs: dns %v email %v uri %v", cert.DNSNames, cert.EmailAddresses, cert.URIs)
	}
	if len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth || cert.IsCA {
		t.Errorf("usage %v, IsCA %v", cert.ExtKeyUsage, cert.IsCA)
	}
	if want := epoch.Add(DefaultClientLifetime); !notAfter.Equal(want) || !cert.NotAfter.Equal(want) {
		t.Errorf("expires %s (cert %s), want %s", notAfter, cert.NotAfter, want)
	}
	if id, err := MachineID(cert); err != nil || id != "m-1" {
		t.Errorf("MachineID: %q, %v", id, err)
	}
	if err := cert.CheckSignatureFrom(c.Certificate()); err != nil {
		t.Error(err)
	}
}

func TestParseCSRRefuses(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	good := csrFor(t, p256(t), &x509.CertificateRequest{})
	tampered := append([]byte(nil), good.Raw...)
	tampered[len(tampered)-5] ^= 0xff
	tests := []struct {
		name string
		in   string
	}{
		{"rsa_key", string(csrFor(t, rsaKey, &x509.CertificateRequest{}).Raw)},
		{"p384_key", string(csrFor(t, p384, &x509.CertificateRequest{}).Raw)},
		{"bad_signature", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tampered}))},
		{"a_certificate", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: good.Raw}))},
		{"garbage", "not a csr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseCSR(tt.in); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if _, err := ParseCSR(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: good.Raw}))); err != nil {
		t.Errorf("good CSR refused: %v", err)
	}
}

func TestMachineIDRefusesCertificatesThatDisagree(t *testing.T) {
	u := func(s string) []*url.URL { p, _ := url.Parse(s); return []*url.URL{p} }
	tests := []struct {
		name string
		cert x509.Certificate
	}{
		{"no_uri", x509.Certificate{Subject: pkix.Name{CommonName: "m-1"}}},
		{"uri_names_another", x509.Certificate{Subject: pkix.Name{CommonName: "m-1"}, URIs: u("einsora:machine:m-2")}},
		{"bad_id", x509.Certificate{Subject: pkix.Name{CommonName: "m 1/.."}, URIs: u("einsora:machine:m%201")}},
		{"empty", x509.Certificate{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if id, err := MachineID(&tt.cert); err == nil {
				t.Fatalf("named %q", id)
			}
		})
	}
}

func TestServerCertificateKeptAndRemadeForNewNames(t *testing.T) {
	dir := t.TempDir()
	c := openCA(t, dir, clock.Real{})
	a, err := c.ServerCertificate([]string{"localhost", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Certificate) != 2 || !protocol.FingerprintMatches(a.Certificate[1], c.Fingerprint()) {
		t.Fatalf("chain of %d, want leaf and CA", len(a.Certificate))
	}
	if err := a.Leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Error(err)
	}
	if st, _ := os.Stat(filepath.Join(dir, ServerKeyFile)); st == nil || st.Mode().Perm() != 0o600 {
		t.Errorf("server key mode: %v", st)
	}
	b, err := c.ServerCertificate([]string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if string(b.Certificate[0]) != string(a.Certificate[0]) {
		t.Error("a certificate covering the names was not kept")
	}
	d, err := c.ServerCertificate([]string{"hub.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Leaf.VerifyHostname("hub.example.com") != nil {
		t.Error("new name not covered")
	}
}

func TestShortLifetimeBackdatesLittle(t *testing.T) {
	c, err := Open(Options{Dir: t.TempDir(), Clock: clock.NewFake(epoch), ClientLifetime: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := c.SignMachine(csrFor(t, p256(t), &x509.CertificateRequest{}), "m-1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(certPEM)
	cert, _ := x509.ParseCertificate(b.Bytes)
	if got := epoch.Sub(cert.NotBefore); got != time.Second {
		t.Errorf("backdated %s, want a tenth of the 10s life", got)
	}
}

// A secret is the CA's: the same CA, opened again, derives the same one
// for a label, another label or another CA a different one.
func TestSecretIsTheCAsAndTheLabels(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(epoch)
	a, err := openCA(t, dir, clk).Secret("x")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := openCA(t, dir, clk).Secret("x")
	other, _ := openCA(t, dir, clk).Secret("y")
	elsewhere, _ := openCA(t, t.TempDir(), clk).Secret("x")
	if a != again {
		t.Error("the same CA opened again derived another secret")
	}
	if a == other || a == elsewhere {
		t.Error("another label or another CA derived the same secret")
	}
	if a == ([32]byte{}) {
		t.Error("the secret is all zeros")
	}
}
