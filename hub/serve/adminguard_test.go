package serve

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
)

func adminRequest(src, token string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/v1/tenants", nil)
	r.RemoteAddr = src
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

// Wrong admin tokens hold their source back for a time that doubles up to
// a cap; other sources are not held back, and a right token clears it.
func TestWrongAdminTokensAreThrottled(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	lim := Limits{AdminFailDelay: time.Second, AdminFailMax: 4 * time.Second}.withDefaults(1)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer right" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	g := guardAdmin(inner, lim, clk)
	do := func(src, token string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		g.ServeHTTP(w, adminRequest(src, token))
		return w
	}
	const attacker = "192.0.2.1:5000"
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		if w := do(attacker, "guess"); w.Code != http.StatusUnauthorized {
			t.Fatalf("guess %d: got %d, want 401", i, w.Code)
		}
		w := do(attacker, "right")
		ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
		if w.Code != http.StatusTooManyRequests || time.Duration(ra)*time.Second != want {
			t.Fatalf("after guess %d: got %d, Retry-After %q; want 429 for %s", i, w.Code, w.Header().Get("Retry-After"), want)
		}
		if w := do("192.0.2.2:5000", "right"); w.Code != http.StatusOK {
			t.Fatalf("another source held back: %d", w.Code)
		}
		clk.Advance(want)
	}
	if w := do(attacker, "right"); w.Code != http.StatusOK {
		t.Fatalf("after the hold, the right token: got %d", w.Code)
	}
	if w := do(attacker, "guess"); w.Code != http.StatusUnauthorized {
		t.Fatalf("got %d", w.Code)
	}
	if w := do(attacker, "x"); w.Header().Get("Retry-After") != "1" {
		t.Errorf("a right token did not clear the source's record: Retry-After %q", w.Header().Get("Retry-After"))
	}
}

// The table of throttled sources stays within its bound however many
// sources guess.
func TestAdminThrottleTableIsBounded(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	th := newThrottle(clk, time.Second, time.Minute, 10)
	for i := range 1000 {
		th.fail("198.51.100." + strconv.Itoa(i))
		clk.Advance(time.Millisecond)
	}
	if n := th.len(); n > 10 {
		t.Fatalf("%d sources remembered, want at most 10", n)
	}
	if th.wait("198.51.100.999") == 0 {
		t.Error("the latest guesser was forgotten first")
	}
}

// The admin API has its own budget of requests in flight.
func TestAdminBudget(t *testing.T) {
	lim := Limits{MaxAdminActive: 1}.withDefaults(1)
	release := make(chan struct{})
	started := make(chan struct{})
	g := guardAdmin(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
	}), lim, clock.Real{})
	go g.ServeHTTP(httptest.NewRecorder(), adminRequest("127.0.0.1:1", "t"))
	<-started
	w := httptest.NewRecorder()
	g.ServeHTTP(w, adminRequest("127.0.0.1:2", "t"))
	close(release)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("over the admin budget: got %d, Retry-After %q; want 503 with one", w.Code, w.Header().Get("Retry-After"))
	}
}

// runHub runs Run until the test ends and returns the admin URL, or Run's
// error if it fails to start.
func runHub(t *testing.T, opts Options) (string, error) {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(t.TempDir(), "data")
	}
	opts.Listen = "127.0.0.1:0"
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ready := make(chan string, 1)
	opts.Ready = func(adminURL, _ string) { ready <- adminURL }
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, opts) }()
	select {
	case url := <-ready:
		t.Cleanup(func() { cancel(); <-errc })
		return url, nil
	case err := <-errc:
		cancel()
		return "", err
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("the hub did not start")
		return "", nil
	}
}

// Beyond loopback the admin API needs TLS, or the operator's explicit
// acceptance of cleartext.
func TestAdminBeyondLoopbackNeedsTLSOrConsent(t *testing.T) {
	_, err := runHub(t, Options{AdminAddr: "0.0.0.0:0"})
	if err == nil || !strings.Contains(err.Error(), "--admin-tls-cert") || !strings.Contains(err.Error(), "--admin-insecure") ||
		strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v, want a one-line refusal naming the flags", err)
	}
	if _, err := runHub(t, Options{AdminAddr: "0.0.0.0:0", AdminInsecure: true}); err != nil {
		t.Fatalf("with --admin-insecure: %v", err)
	}
	if _, err := runHub(t, Options{AdminAddr: "0.0.0.0:0", AdminTLSCert: "x.pem"}); err == nil || !strings.Contains(err.Error(), "both") {
		t.Fatalf("a certificate without its key: got %v", err)
	}
	certFile, keyFile, pool := selfSigned(t)
	url, err := runHub(t, Options{AdminAddr: "0.0.0.0:0", AdminTLSCert: certFile, AdminTLSKey: keyFile})
	if err != nil {
		t.Fatalf("with TLS: %v", err)
	}
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("admin URL %s, want https", url)
	}
	_, port, _ := strings.Cut(strings.TrimPrefix(url, "https://"), ":")
	port = port[strings.LastIndex(port, ":")+1:]
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}}
	resp, err := c.Get("https://127.0.0.1:" + port + "/v1/tenants")
	if err != nil {
		t.Fatalf("admin over TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("admin over TLS without a token: %d, want 401", resp.StatusCode)
	}
}

func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "admin"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// The data directory is its owner's alone, and so are the store, the
// admin token and the CA's key: also when an older hub left them open.
func TestSecretsAreOwnersOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	os.MkdirAll(dir, 0o755)
	os.Chmod(dir, 0o755)
	os.WriteFile(filepath.Join(dir, hub.AdminTokenFile), []byte("old-token\n"), 0o644)
	os.Chmod(filepath.Join(dir, hub.AdminTokenFile), 0o644)
	if _, err := runHub(t, Options{DataDir: dir, AdminAddr: "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{
		dir: 0o700, filepath.Join(dir, "hub.db"): 0o600, filepath.Join(dir, "hub.db-wal"): 0o600,
		filepath.Join(dir, "hub.db-shm"): 0o600, filepath.Join(dir, hub.AdminTokenFile): 0o600,
		filepath.Join(dir, ca.KeyFile): 0o600,
	}
	for path, mode := range want {
		st, err := os.Stat(path)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %o, want %o", filepath.Base(path), st.Mode().Perm(), mode)
		}
	}
}
