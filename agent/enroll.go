package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/internal/atomicfile"
	"einsora.dev/edge/protocol"
)

// Files of an enrolled agent, in its state directory. The key never leaves
// the machine and is readable by the agent alone.
const (
	KeyFile   = "agent.key"
	CertFile  = "agent.crt"
	HubCAFile = "hub-ca.crt"
	// HubFile records the hub enrolled with; it is written last, so its
	// presence means the enrolment is complete.
	HubFile = "hub.json"
)

// ErrNotEnrolled is returned by OpenNetwork for a state directory that
// holds no enrolment.
var ErrNotEnrolled = errors.New("this agent is not enrolled with a hub")

// Enrollment is what HubFile records.
type Enrollment struct {
	HubURL        string    `json:"hub_url"`
	CAFingerprint string    `json:"ca_fingerprint"`
	MachineID     string    `json:"machine_id"`
	Owner         string    `json:"owner"`
	Region        string    `json:"region"`
	Enrolled      time.Time `json:"enrolled"`
	CertExpires   time.Time `json:"cert_expires"`
}

// EnrollOptions configures Enroll.
type EnrollOptions struct {
	StateDir string
	HubURL   string
	Token    string
	// Name is the machine's display name; "" means its host name.
	Name string
}

// Enroll enrols this machine with a hub. It takes the state directory's
// lock (so it cannot race a running agent), makes the machine's ECDSA P-256
// key, and posts the token with a CSR to the hub, trusting only the CA whose
// fingerprint the token carries: a hub that cannot prove it holds that CA
// is refused before anything is sent. The certificate it gets back names
// the machine; owner and region are the token's.
func Enroll(ctx context.Context, opts EnrollOptions) (*Enrollment, error) {
	tok, err := protocol.ParseToken(opts.Token)
	if err != nil {
		return nil, fmt.Errorf("enrol: %w", err)
	}
	hubURL, err := hubclient.ParseHubURL(opts.HubURL)
	if err != nil {
		return nil, fmt.Errorf("enrol: %w", err)
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("enrol: state dir: %w", err)
	}
	lock, err := lockState(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("enrol: %w", err)
	}
	defer lock.Unlock()
	id, err := loadMachineID(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("enrol: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("enrol: key: %w", err)
	}
	csr, err := newCSR(key, id)
	if err != nil {
		return nil, fmt.Errorf("enrol: %w", err)
	}
	name := opts.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	resp, err := hubclient.Enroll(ctx, hubURL.String(), tok.Fingerprint, &protocol.EnrollRequest{
		Token: tok.String(), CSR: string(csr), MachineID: id, Name: name,
	})
	if err != nil {
		return nil, fmt.Errorf("enrol with %s: %w", hubURL, err)
	}
	caCert, leaf, err := checkIssued(resp, key, id, tok.Fingerprint)
	if err != nil {
		return nil, fmt.Errorf("enrol with %s: %w", hubURL, err)
	}
	dir := opts.StateDir
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("enrol: %w", err)
	}
	e := &Enrollment{
		HubURL: hubURL.String(), CAFingerprint: hex.EncodeToString(tok.Fingerprint[:]), MachineID: id,
		Owner: resp.Owner, Region: resp.Region, Enrolled: time.Now().UTC(), CertExpires: leaf.NotAfter,
	}
	hubJSON, _ := json.MarshalIndent(e, "", "  ")
	for _, f := range []struct {
		name string
		data []byte
		perm os.FileMode
	}{
		{KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600},
		{CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), 0o644},
		{HubCAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}), 0o644},
		{HubFile, append(hubJSON, '\n'), 0o644},
	} {
		if err := atomicfile.Write(filepath.Join(dir, f.name), f.data, f.perm); err != nil {
			return nil, fmt.Errorf("enrol: save %s: %w", f.name, err)
		}
	}
	if err := clearRevoked(dir); err != nil {
		return nil, fmt.Errorf("enrol: %w", err)
	}
	if err := keepEnrolledHubs(dir, resp.Hubs); err != nil {
		return nil, fmt.Errorf("enrol: %w", err)
	}
	return e, nil
}

// keepEnrolledHubs saves the replicas' URLs of the enrolment answer in the
// agent's state, so its first run can fail over to them: a hub that sends
// none leaves the state as it was.
func keepEnrolledHubs(dir string, urls []string) error {
	kept, _ := protocol.KeepHubs(urls)
	if len(kept) == 0 {
		return nil
	}
	st, err := loadState(dir)
	if err != nil {
		return err
	}
	st.Hubs = kept
	return saveState(dir, st)
}

func newCSR(key *ecdsa.PrivateKey, machineID string) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: machineID}}, key)
	if err != nil {
		return nil, fmt.Errorf("csr: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// checkIssued checks what the hub sent back: the pinned CA, and a client
// certificate from it for this key and this machine.
func checkIssued(resp *protocol.CertificateResponse, key *ecdsa.PrivateKey, id string, fp [32]byte) (caCert, leaf *x509.Certificate, err error) {
	caCert, err = parseCertPEM(resp.CA)
	if err != nil {
		return nil, nil, fmt.Errorf("the hub's CA: %w", err)
	}
	if !protocol.FingerprintMatches(caCert.Raw, fp) {
		return nil, nil, errors.New("the hub sent a CA other than the pinned one")
	}
	leaf, err = parseCertPEM(resp.Certificate)
	if err != nil {
		return nil, nil, fmt.Errorf("the certificate issued: %w", err)
	}
	if !key.PublicKey.Equal(leaf.PublicKey) {
		return nil, nil, errors.New("the certificate issued is not for this machine's key")
	}
	if leaf.Subject.CommonName != id {
		return nil, nil, fmt.Errorf("the certificate issued names %q, not this machine %s", leaf.Subject.CommonName, id)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, nil, fmt.Errorf("the certificate issued: %w (is this machine's clock right?)", err)
	}
	return caCert, leaf, nil
}

func parseCertPEM(s string) (*x509.Certificate, error) {
	b, _ := pem.Decode([]byte(s))
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// ReadEnrollment reads the enrolment recorded in dir.
func ReadEnrollment(dir string) (*Enrollment, error) {
	b, err := os.ReadFile(filepath.Join(dir, HubFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (no %s in %s); enrol it with: einsora-agent enroll --hub https://HOST:8443 --token TOKEN --state-dir %s",
			ErrNotEnrolled, HubFile, dir, dir)
	}
	if err != nil {
		return nil, err
	}
	var e Enrollment
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%s is corrupt: %w; enrol again", filepath.Join(dir, HubFile), err)
	}
	return &e, nil
}

// NetworkOptions configures OpenNetwork.
type NetworkOptions struct {
	Logger *slog.Logger
	Clock  clock.Clock
	// Rand returns a value in [0, 1) for the jitter of renewals; nil
	// means math/rand/v2.
	Rand func() float64
}

// Network is an enrolled agent's link to its hub: the HTTPS transport with
// the machine's certificate, and the renewal that keeps the certificate
// fresh without interrupting sync.
type Network struct {
	dir   string
	id    string
	key   *ecdsa.PrivateKey
	ca    *x509.Certificate
	t     *hubclient.HTTPS
	clk   clock.Clock
	log   *slog.Logger
	rand  func() float64
	hubFP [32]byte
}

// OpenNetwork loads an enrolled agent's identity from dir and makes its
// transport. A directory that holds no enrolment gives ErrNotEnrolled.
func OpenNetwork(dir string, opts NetworkOptions) (*Network, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Rand == nil {
		opts.Rand = mrand.Float64
	}
	e, err := ReadEnrollment(dir)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Network, error) {
		return nil, fmt.Errorf("the enrolment in %s is unusable: %w; enrol again with: einsora-agent enroll", dir, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, HubCAFile))
	if err != nil {
		return fail(err)
	}
	caCert, err := parseCertPEM(string(caPEM))
	if err != nil {
		return fail(fmt.Errorf("%s: %w", HubCAFile, err))
	}
	if fp := protocol.FingerprintOf(caCert.Raw); hex.EncodeToString(fp[:]) != e.CAFingerprint {
		return fail(fmt.Errorf("%s is not the CA enrolled with", HubCAFile))
	}
	tc, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		return fail(err)
	}
	key, ok := tc.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return fail(errors.New("the key is not ECDSA"))
	}
	t, err := hubclient.NewHTTPS(hubclient.HTTPSConfig{URL: e.HubURL, CA: caCert, Certificate: tc})
	if err != nil {
		return fail(err)
	}
	return &Network{
		dir: dir, id: e.MachineID, key: key, ca: caCert, t: t, clk: opts.Clock,
		log: opts.Logger.With("component", "agent"), rand: opts.Rand, hubFP: protocol.FingerprintOf(caCert.Raw),
	}, nil
}

// Transport is the HTTPS transport, for Config.Transport or SetTransport.
func (n *Network) Transport() *hubclient.HTTPS { return n.t }

// CertExpires is when the certificate in use expires.
func (n *Network) CertExpires() time.Time { return n.t.Certificate().Leaf.NotAfter }

// renewal jitter: a certificate is renewed at 70% of its life, give or take
// a tenth of that, so a fleet enrolled together does not renew together.
const (
	renewAt     = 0.70
	renewJitter = 0.10
)

// renewTime is when leaf is due for renewal.
func (n *Network) renewTime(leaf *x509.Certificate) time.Time {
	frac := renewAt * (1 + renewJitter*(2*n.rand()-1))
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	return leaf.NotBefore.Add(time.Duration(float64(life) * frac))
}

// RunRenewal renews the certificate at about 70% of its life, over the
// same channel as sync, until ctx is done. A failed renewal is tried again
// with backoff while the certificate lasts. It never interrupts sync: the
// new certificate is swapped in atomically and used for new connections.
func (n *Network) RunRenewal(ctx context.Context) {
	for ctx.Err() == nil {
		leaf := n.t.Certificate().Leaf
		wait := n.renewTime(leaf).Sub(n.clk.Now())
		n.log.Debug("certificate renewal scheduled", "in", wait.Round(time.Second), "expires", leaf.NotAfter)
		if !clock.Sleep(n.clk, wait, ctx.Done()) {
			return
		}
		life := leaf.NotAfter.Sub(leaf.NotBefore)
		bo := hubclient.Backoff{Base: time.Second, Cap: min(5*time.Minute, max(time.Second, life/20))}
		for {
			err := n.Renew(ctx)
			if err == nil || ctx.Err() != nil {
				break
			}
			d := bo.Next()
			if n.clk.Now().After(leaf.NotAfter) {
				n.log.Error("this machine's certificate expired before it could be renewed; enrol it again with: einsora-agent enroll", "err", err)
				d = max(d, time.Minute)
			} else if bo.Attempt() == 1 {
				n.log.Warn("certificate renewal failed; retrying while it lasts", "err", err, "expires", leaf.NotAfter)
			}
			if !clock.Sleep(n.clk, d, ctx.Done()) {
				return
			}
		}
	}
}

// Renew renews the certificate now: a new CSR for the machine's key, a new
// certificate from the hub, saved, then swapped in.
func (n *Network) Renew(ctx context.Context) error {
	csr, err := newCSR(n.key, n.id)
	if err != nil {
		return fmt.Errorf("renew: %w", err)
	}
	resp, err := n.t.Renew(ctx, csr)
	if err != nil {
		return err
	}
	_, leaf, err := checkIssued(resp, n.key, n.id, n.hubFP)
	if err != nil {
		return fmt.Errorf("renew: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(n.dir, CertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), 0o644); err != nil {
		return fmt.Errorf("renew: save certificate: %w", err)
	}
	if err := n.t.SetCertificate(tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: n.key, Leaf: leaf}); err != nil {
		return fmt.Errorf("renew: %w", err)
	}
	n.log.Info("certificate renewed", "expires", leaf.NotAfter)
	return nil
}
