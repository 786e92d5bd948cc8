// Package ca is the hub's certificate authority: an ECDSA P-256 CA kept in
// the hub's data directory, which signs the hub's server certificate and each
// machine's client certificate. A machine is named by its certificate's
// common name and by a URI SAN einsora:machine:<id>; owner and region are
// not in the certificate, they are the store's, fixed at enrolment.
package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/internal/atomicfile"
	"einsora.dev/edge/protocol"
)

// Files in the data directory. The keys are mode 0600.
const (
	CertFile       = "ca.crt"
	KeyFile        = "ca.key"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
)

// Defaults.
const (
	DefaultClientLifetime = 30 * 24 * time.Hour
	DefaultServerLifetime = 365 * 24 * time.Hour
	caLifetime            = 10 * 365 * 24 * time.Hour
	// backdate covers agents whose clock runs a little behind the hub's;
	// a tenth of a short lifetime at most, so renewal at 70% of the life
	// stays 70% of the time from issue.
	backdate = 5 * time.Minute
)

// Options configures Open.
type Options struct {
	// Dir is the hub's data directory.
	Dir   string
	Clock clock.Clock
	// ClientLifetime is how long a machine's certificate is valid; zero
	// means DefaultClientLifetime. Tests shorten it to exercise renewal.
	ClientLifetime time.Duration
}

// CA is the hub's certificate authority. Its methods are safe for
// concurrent use; it never changes after Open.
type CA struct {
	cert     *x509.Certificate
	certPEM  []byte
	key      *ecdsa.PrivateKey
	fp       [32]byte
	dir      string
	clk      clock.Clock
	lifetime time.Duration
}

// Open loads the CA from opts.Dir, creating it the first time.
func Open(opts Options) (*CA, error) {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.ClientLifetime <= 0 {
		opts.ClientLifetime = DefaultClientLifetime
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	certPath, keyPath := filepath.Join(opts.Dir, CertFile), filepath.Join(opts.Dir, KeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	switch {
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
		if err := create(opts.Dir, opts.Clock.Now()); err != nil {
			return nil, fmt.Errorf("ca: create: %w", err)
		}
	case certErr != nil || keyErr != nil:
		return nil, fmt.Errorf("ca: %s and %s must both exist or both be absent; restore the missing one from a backup (removing both makes a new CA, and every machine must enrol again)", certPath, keyPath)
	}
	cert, certPEM, err := readCert(certPath)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	key, err := readKey(keyPath)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("ca: %s does not belong to %s; restore the pair from a backup", keyPath, certPath)
	}
	return &CA{
		cert: cert, certPEM: certPEM, key: key, fp: protocol.FingerprintOf(cert.Raw),
		dir: opts.Dir, clk: opts.Clock, lifetime: opts.ClientLifetime,
	}, nil
}

func create(dir string, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := newSerial()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Einsora hub CA " + serial.Text(16)[:8], Organization: []string{"Einsora"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	// The key first: a cert without its key is refused at the next start,
	// a key without its cert is too, and neither is silently replaced.
	if err := writeKey(filepath.Join(dir, KeyFile), key); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, CertFile), pemCert(der), 0o644)
}

// Certificate is the CA certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// CertificatePEM is the CA certificate in PEM.
func (c *CA) CertificatePEM() []byte { return slices.Clone(c.certPEM) }

// Fingerprint is the SHA-256 of the CA certificate's DER: what enrolment
// tokens carry and agents pin.
func (c *CA) Fingerprint() [32]byte { return c.fp }

// Secret is a 32-byte key derived from the CA's private key for label:
// every hub holding this CA (a restarted one, each replica) derives the
// same, and nobody without the CA's key can. Its holder can do no more
// than the CA's key already lets it.
func (c *CA) Secret(label string) ([32]byte, error) {
	var out [32]byte
	ikm, err := c.key.Bytes()
	if err != nil {
		return out, fmt.Errorf("ca: the key's bytes: %w", err)
	}
	k, err := hkdf.Key(sha256.New, ikm, c.fp[:], "einsora ca secret: "+label, len(out))
	if err != nil {
		return out, fmt.Errorf("ca: derive %q: %w", label, err)
	}
	copy(out[:], k)
	return out, nil
}

// Pool is a pool holding only the CA.
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// SignMachine issues a client certificate for the CSR's key naming
// machineID, valid for the configured lifetime. Only the CSR's key is used:
// its subject and extensions are ignored.
func (c *CA) SignMachine(csr *x509.CertificateRequest, machineID string) (certPEM []byte, notAfter time.Time, err error) {
	if err := CheckMachineID(machineID); err != nil {
		return nil, time.Time{}, err
	}
	if err := CheckCSR(csr); err != nil {
		return nil, time.Time{}, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, time.Time{}, err
	}
	now := c.clk.Now()
	// Certificates hold whole seconds; the store holds the same instant.
	notAfter = now.Add(c.lifetime).Truncate(time.Second)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	u, _ := url.Parse(protocol.MachineURIPrefix + machineID)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: machineID},
		NotBefore:    now.Add(-min(backdate, c.lifetime/10)),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{u},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, csr.PublicKey, c.key)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("sign certificate of %s: %w", machineID, err)
	}
	return pemCert(der), notAfter, nil
}

// ServerCertificate returns the hub's TLS certificate for names (host names
// and IP addresses), chained to the CA. It is kept in the data directory and
// made again when it lacks a name or has less than a third of its life left.
func (c *CA) ServerCertificate(names []string) (tls.Certificate, error) {
	certPath, keyPath := filepath.Join(c.dir, ServerCertFile), filepath.Join(c.dir, ServerKeyFile)
	if tc, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil {
		leaf := tc.Leaf
		now := c.clk.Now()
		if leaf != nil && coversNames(leaf, names) && leaf.NotAfter.Sub(now) > DefaultServerLifetime/3 &&
			leaf.CheckSignatureFrom(c.cert) == nil {
			tc.Certificate = append(tc.Certificate[:1], c.cert.Raw)
			return tc, nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := newSerial()
	if err != nil {
		return tls.Certificate{}, err
	}
	now := c.clk.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(DefaultServerLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("server certificate: %w", err)
	}
	if err := writeKey(keyPath, key); err != nil {
		return tls.Certificate{}, fmt.Errorf("server certificate: %w", err)
	}
	if err := atomicfile.Write(certPath, pemCert(der), 0o644); err != nil {
		return tls.Certificate{}, fmt.Errorf("server certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

func coversNames(leaf *x509.Certificate, names []string) bool {
	for _, n := range names {
		if leaf.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

var machineIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// CheckMachineID refuses IDs that could not be a machine ID saved by an
// agent: they go into certificates and URIs.
func CheckMachineID(id string) error {
	if len(id) == 0 || len(id) > protocol.MaxIDLength || !machineIDPattern.MatchString(id) {
		return fmt.Errorf("machine id %q: want 1 to %d letters, digits, '.', '_' or '-'", id, protocol.MaxIDLength)
	}
	return nil
}

// ParseCSR reads a PEM (or bare DER) certificate request and checks it.
func ParseCSR(s string) (*x509.CertificateRequest, error) {
	der := []byte(s)
	if b, _ := pem.Decode([]byte(s)); b != nil {
		if b.Type != "CERTIFICATE REQUEST" {
			return nil, fmt.Errorf("csr: PEM block %q, want CERTIFICATE REQUEST", b.Type)
		}
		der = b.Bytes
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("csr: %w", err)
	}
	if err := CheckCSR(csr); err != nil {
		return nil, err
	}
	return csr, nil
}

// CheckCSR accepts a CSR for an ECDSA P-256 key whose signature proves the
// sender holds the key.
func CheckCSR(csr *x509.CertificateRequest) error {
	pub, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return errors.New("csr: want an ECDSA P-256 key")
	}
	if err := csr.CheckSignature(); err != nil {
		return fmt.Errorf("csr: %w", err)
	}
	return nil
}

// MachineID returns the machine a client certificate names: its common name,
// which must agree with its einsora:machine: URI SAN.
func MachineID(cert *x509.Certificate) (string, error) {
	id := cert.Subject.CommonName
	if err := CheckMachineID(id); err != nil {
		return "", fmt.Errorf("client certificate: %w", err)
	}
	for _, u := range cert.URIs {
		if rest, ok := strings.CutPrefix(u.String(), protocol.MachineURIPrefix); ok {
			if rest != id {
				return "", errors.New("client certificate: its common name and URI name different machines")
			}
			return id, nil
		}
	}
	return "", errors.New("client certificate: names no machine (no " + protocol.MachineURIPrefix + " URI)")
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	return n.Add(n, big.NewInt(1)), nil // never zero
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func readCert(path string) (*x509.Certificate, []byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return cert, pemCert(blk.Bytes), nil
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s holds no PEM key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an ECDSA key", path)
	}
	return ek, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// Serial is how the hub names a certificate: its serial number in
// lowercase hex.
func Serial(cert *x509.Certificate) string {
	if cert.SerialNumber == nil {
		return ""
	}
	return cert.SerialNumber.Text(16)
}
