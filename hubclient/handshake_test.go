package hubclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"einsora.dev/edge/protocol"
)

// handshakeServer is a TLS listener that counts handshakes (every
// ClientHello, resumed or not) and treats each connection with serve.
func handshakeServer(t *testing.T, cfg *tls.Config, serve func(*tls.Conn)) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		n.Add(1)
		return nil, nil
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c.(*tls.Conn))
			}()
		}
	}()
	return "https://" + ln.Addr().String(), &n
}

// A hub that closes connections before it answers: each try of the agent
// is one TLS connection, and no probe connection is added to it.
func TestOneConnectionPerTryWhenTheHubCloses(t *testing.T) {
	hubCA := newTestCA(t)
	url, handshakes := handshakeServer(t, &tls.Config{
		Certificates: []tls.Certificate{hubCA.issue(t, "hub", x509.ExtKeyUsageServerAuth, "127.0.0.1")},
		ClientAuth:   tls.RequestClientCert, MinVersion: tls.VersionTLS13, NextProtos: []string{"h2", "http/1.1"},
	}, func(c *tls.Conn) { c.Handshake() })
	tr := newTransport(t, hubCA, url, nil)
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version}
	for try := int64(1); try <= 4; try++ {
		if _, err := tr.Sync(context.Background(), req); err == nil {
			t.Fatal("a sync succeeded against a hub that closes every connection")
		}
		if n := handshakes.Load(); n != try {
			t.Fatalf("after %d tries: %d TLS handshakes, want one per try", try, n)
		}
	}
}

// A hub that refuses the certificate: the reason is named by the agent's
// next try at the latest, on that try's own connection.
func TestRefusalNamedWithoutAProbeConnection(t *testing.T) {
	hubCA, otherCA := newTestCA(t), newTestCA(t)
	pool := x509.NewCertPool()
	pool.AddCert(otherCA.cert)
	url, handshakes := handshakeServer(t, &tls.Config{
		Certificates: []tls.Certificate{hubCA.issue(t, "hub", x509.ExtKeyUsageServerAuth, "127.0.0.1")},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: pool,
		MinVersion: tls.VersionTLS13, NextProtos: []string{"h2", "http/1.1"},
	}, func(c *tls.Conn) {
		if c.Handshake() == nil {
			t.Error("the stand-in hub accepted a certificate of another CA")
		}
	})
	tr := newTransport(t, hubCA, url, nil)
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version}
	var refused *TLSRefusedError
	_, err := tr.Sync(context.Background(), req)
	if n := handshakes.Load(); n != 1 {
		t.Fatalf("first try: %d TLS handshakes, want 1", n)
	}
	if !errors.As(err, &refused) {
		_, err = tr.Sync(context.Background(), req)
		if n := handshakes.Load(); n != 2 {
			t.Fatalf("second try: %d TLS handshakes in all, want 2", n)
		}
	}
	if !errors.As(err, &refused) || refused.Alert != "unknown certificate authority" {
		t.Fatalf("got %v, want the refusal named by the second try", err)
	}
}

// A poll on a connection that served before, cut when the hub goes away,
// is no refusal: the next try speaks HTTP/2 at once, without the
// diagnostic wait.
func TestCutPollIsNotDiagnosed(t *testing.T) {
	hubCA := newTestCA(t)
	held := make(chan struct{}, 1)
	var protos []int
	var mu sync.Mutex
	srv, _ := countingServer(t, hubCA.issue(t, "hub", x509.ExtKeyUsageServerAuth, "127.0.0.1"), func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos = append(protos, r.ProtoMajor)
		n := len(protos)
		mu.Unlock()
		if n == 2 {
			held <- struct{}{}
			<-r.Context().Done()
			return
		}
		json.NewEncoder(w).Encode(protocol.SyncResponse{StoreID: "st-1"})
	})
	tr := newTransport(t, hubCA, srv.URL, nil)
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version}
	if _, err := tr.Sync(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := tr.Sync(context.Background(), req); done <- err }()
	<-held
	srv.CloseClientConnections()
	if err := <-done; err == nil {
		t.Fatal("the cut poll succeeded")
	}
	if _, err := tr.Sync(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(protos) != 3 || protos[2] != 2 {
		t.Fatalf("requests by HTTP major version %v, want the third over HTTP/2", protos)
	}
}
