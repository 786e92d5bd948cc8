package hubclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/protocol"
)

// testCA is a CA for tests, made with the standard library alone.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key}
}

func (c *testCA) fingerprint() [32]byte { return protocol.FingerprintOf(c.cert.Raw) }

// issue makes a leaf for usage, valid for names (server) or naming cn
// (client), chained to c.
func (c *testCA) issue(t *testing.T, cn string, usage x509.ExtKeyUsage, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature,
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
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: leaf}
}

// countingServer is a TLS hub stand-in that counts the requests it got.
func countingServer(t *testing.T, cert tls.Certificate, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS13}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &n
}

func okEnroll(w http.ResponseWriter, r *http.Request) {
	json.NewEncoder(w).Encode(protocol.CertificateResponse{MachineID: "m-1"})
}

// A token naming another CA: the agent refuses the hub during the
// handshake, and neither the token nor the CSR is ever sent.
func TestEnrollWithWrongFingerprintSendsNothing(t *testing.T) {
	hubCA, otherCA := newTestCA(t), newTestCA(t)
	srv, requests := countingServer(t, hubCA.issue(t, "hub", x509.ExtKeyUsageServerAuth, "127.0.0.1"), okEnroll)
	req := &protocol.EnrollRequest{Token: "est1.secret", CSR: "csr", MachineID: "m-1"}

	_, err := Enroll(context.Background(), srv.URL, otherCA.fingerprint(), req)
	var pe *PinError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "nothing was sent") {
		t.Fatalf("got %v, want a PinError", err)
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("the hub saw %d requests; want none before the CA is proven", n)
	}

	// The same hub with the right fingerprint is trusted.
	if _, err := Enroll(context.Background(), srv.URL, hubCA.fingerprint(), req); err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("the hub saw %d requests, want 1", n)
	}
}

func TestPinnedRefusesCertificateForAnotherHost(t *testing.T) {
	hubCA := newTestCA(t)
	srv, requests := countingServer(t, hubCA.issue(t, "hub", x509.ExtKeyUsageServerAuth, "hub.example.com"), okEnroll)
	_, err := Enroll(context.Background(), srv.URL, hubCA.fingerprint(), &protocol.EnrollRequest{})
	var pe *PinError
	if !errors.As(err, &pe) || requests.Load() != 0 {
		t.Fatalf("got %v with %d requests, want a PinError and none", err, requests.Load())
	}
}

// A CA presented as the server's own certificate proves nothing.
func TestPinnedRefusesTheCAAsLeaf(t *testing.T) {
	hubCA := newTestCA(t)
	cert := tls.Certificate{Certificate: [][]byte{hubCA.cert.Raw}, PrivateKey: hubCA.key}
	srv, requests := countingServer(t, cert, okEnroll)
	_, err := Enroll(context.Background(), srv.URL, hubCA.fingerprint(), &protocol.EnrollRequest{})
	if err == nil || requests.Load() != 0 {
		t.Fatalf("got %v with %d requests", err, requests.Load())
	}
}

func TestParseHubURL(t *testing.T) {
	for _, s := range []string{"http://hub:8443", "hub:8443", "https://", "https://u:p@hub", "https://hub/x", "https://hub?x=1"} {
		if _, err := ParseHubURL(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	if u, err := ParseHubURL(" https://hub.example.com:8443/ "); err != nil || u.String() != "https://hub.example.com:8443" {
		t.Errorf("got %v, %v", u, err)
	}
}

func newTransport(t *testing.T, hubCA *testCA, url string, clk clock.Clock) *HTTPS {
	t.Helper()
	tr, err := NewHTTPS(HTTPSConfig{URL: url, CA: hubCA.cert, Certificate: hubCA.issue(t, "m-1", x509.ExtKeyUsageClientAuth), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// A directed reconnect moves the transport to the URL given, on new
// connections, and says so with ErrReconnect.
func TestSyncFollowsDirectedReconnect(t *testing.T) {
	hubCA := newTestCA(t)
	cert := hubCA.issue(t, "hub", x509.ExtKeyUsageServerAuth, "127.0.0.1")
	next, nextRequests := countingServer(t, cert, func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || r.ProtoMajor != 2 {
			http.Error(w, "want a client certificate over HTTP/2", http.StatusUnauthorized)
			return
		}
		json.NewEncoder(w).Encode(protocol.SyncResponse{StoreID: "st-1", Generation: 3})
	})
	draining, _ := countingServer(t, cert, func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(protocol.SyncResponse{Unchanged: true, Reconnect: &protocol.Reconnect{URL: next.URL}})
	})
	tr := newTransport(t, hubCA, draining.URL, nil)
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version}
	_, err := tr.Sync(context.Background(), req)
	var re *ReconnectError
	if !errors.Is(err, ErrReconnect) || !errors.As(err, &re) || re.To != next.URL || re.Window != 0 {
		t.Fatalf("got %v, want ErrReconnect to %s with no window (immediate)", err, next.URL)
	}
	if tr.URL() != next.URL {
		t.Fatalf("transport dials %s, want %s", tr.URL(), next.URL)
	}
	resp, err := tr.Sync(context.Background(), req)
	if err != nil || resp.Generation != 3 || nextRequests.Load() != 1 {
		t.Fatalf("after the reconnect: %+v, %v, %d requests", resp, err, nextRequests.Load())
	}
}

func TestSyncReportsHubErrorsAndHonoursRetryAfter(t *testing.T) {
	hubCA := newTestCA(t)
	var calls atomic.Int64
	srv, _ := countingServer(t, hubCA.issue(t, "hub", x509.ExtKeyUsageServerAuth, "127.0.0.1"), func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"error":"slow down"}`))
			return
		}
		json.NewEncoder(w).Encode(protocol.SyncResponse{StoreID: "st-1"})
	})
	clk := clock.NewFake(time.Now())
	tr := newTransport(t, hubCA, srv.URL, clk)
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version}
	_, err := tr.Sync(context.Background(), req)
	var he *HubError
	if !errors.As(err, &he) || he.Code != http.StatusTooManyRequests || he.Message != "slow down" || he.RetryAfter != time.Second {
		t.Fatalf("got %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := tr.Sync(context.Background(), req); done <- err }()
	for clk.Timers() == 0 {
		time.Sleep(time.Millisecond)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the next sync went out before the Retry-After passed (%d calls)", n)
	}
	// At least the Retry-After: a moment before it, the wait goes on.
	clk.Advance(time.Second - time.Millisecond)
	if n := clk.Timers(); n != 1 || calls.Load() != 1 {
		t.Fatalf("%d waits, %d calls a moment before the Retry-After passed; want the sync still waiting", n, calls.Load())
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Cancelling a sync that waits for Retry-After ends it at once.
	calls.Store(0)
	tr.Sync(context.Background(), req)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.Sync(ctx, req); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v", err)
	}
}

// A new certificate is used for the next request, on a new connection.
func TestSetCertificateSwapsForNewConnections(t *testing.T) {
	hubCA := newTestCA(t)
	seen := make(chan string, 4)
	srv, _ := countingServer(t, hubCA.issue(t, "hub", x509.ExtKeyUsageServerAuth, "127.0.0.1"), func(w http.ResponseWriter, r *http.Request) {
		seen <- r.TLS.PeerCertificates[0].Subject.CommonName
		json.NewEncoder(w).Encode(protocol.SyncResponse{})
	})
	tr := newTransport(t, hubCA, srv.URL, nil)
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version}
	tr.Sync(context.Background(), req)
	tr.SetCertificate(hubCA.issue(t, "m-1-renewed", x509.ExtKeyUsageClientAuth))
	tr.Sync(context.Background(), req)
	if a, b := <-seen, <-seen; a != "m-1" || b != "m-1-renewed" {
		t.Errorf("the hub saw %q then %q", a, b)
	}
}

// blackhole forwards TCP to addr until cut, then swallows everything in
// both directions without closing: a NAT mapping that vanished.
type blackhole struct {
	ln  net.Listener
	cut atomic.Bool
}

func newBlackhole(t *testing.T, addr string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); up.Close() })
			go b.pipe(up, c)
			go b.pipe(c, up)
		}
	}()
	return b
}

func (b *blackhole) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if b.cut.Load() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// A connection that goes silent in the middle of a long poll is noticed by
// the HTTP/2 health check and the sync fails, rather than hanging.
func TestBlackholedConnectionIsNoticed(t *testing.T) {
	hubCA := newTestCA(t)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	srv, _ := countingServer(t, hubCA.issue(t, "hub", x509.ExtKeyUsageServerAuth, "127.0.0.1"), func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		json.NewEncoder(w).Encode(protocol.SyncResponse{})
	})
	bh := newBlackhole(t, strings.TrimPrefix(srv.URL, "https://"))
	tr, err := NewHTTPS(HTTPSConfig{
		URL: "https://" + bh.ln.Addr().String(), CA: hubCA.cert, Certificate: hubCA.issue(t, "m-1", x509.ExtKeyUsageClientAuth),
		PingAfter: 200 * time.Millisecond, PingTimeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	if _, err := tr.Sync(context.Background(), &protocol.SyncRequest{}); err != nil {
		t.Fatal(err)
	}
	// A held poll, then the path goes dark.
	p := tr.cur
	req, _ := http.NewRequest(http.MethodPost, tr.URL()+protocol.SyncPath, strings.NewReader("{}"))
	req.Header.Set("X-Hold", "1")
	done := make(chan error, 1)
	go func() {
		resp, err := p.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	bh.cut.Store(true)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the held poll succeeded through a black hole")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a black-holed connection went unnoticed for 5s with a 0.4s health check")
	}
}
