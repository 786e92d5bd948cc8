package serve_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/serve"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/internal/testnet"
	"einsora.dev/edge/protocol"
)

// benchHub is a hub with a CA and one registered machine, and that
// machine's client certificate.
func benchHub(b *testing.B, poll time.Duration) (*hub.Hub, *ca.CA, tls.Certificate, tls.Certificate) {
	b.Helper()
	_, authority, st := serve.NewCAAndStore(b)
	h, err := hub.New(context.Background(), hub.Config{AllowSim: true, Store: st, CA: authority, Logger: discard, PollTimeout: poll})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	h.EnsureTenant(ctx, "acme")
	if err := h.RegisterMachine(ctx, "m-1", "m-1", "acme", "local"); err != nil {
		b.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "m-1"}}, key)
	csr, _ := x509.ParseCertificateRequest(der)
	certPEM, _, err := authority.SignMachine(csr, "m-1")
	if err != nil {
		b.Fatal(err)
	}
	client, err := tls.X509KeyPair(certPEM, pemKey(key))
	if err != nil {
		b.Fatal(err)
	}
	server, err := authority.ServerCertificate([]string{"127.0.0.1"})
	if err != nil {
		b.Fatal(err)
	}
	return h, authority, client, server
}

// BenchmarkTLSHandshake is full TLS 1.3 handshakes with client
// certificates (ECDSA P-256, no resumption) against the hub's server
// configuration on loopback, the revocation check in VerifyConnection
// included. Client and hub share the CPUs; run with -cpu 1 for the cost of
// both sides on one core.
func BenchmarkTLSHandshake(b *testing.B) {
	h, authority, client, server := benchHub(b, 0)
	srv := serve.NewServer(serve.Config{Hub: h, CA: authority, Certificate: server, Logger: discard})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	cfg := srv.TLSConfig()
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := tls.Server(c, cfg)
				if tc.Handshake() == nil {
					tc.Write([]byte{1})
				}
			}()
		}
	})
	for _, kx := range []struct {
		name   string
		curves []tls.CurveID
	}{
		// Go's default: hybrid post-quantum key exchange.
		{"X25519MLKEM768", nil},
		{"X25519", []tls.CurveID{tls.X25519}},
	} {
		for _, resume := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/resumed=%v", kx.name, resume), func(b *testing.B) {
				clientCfg := &tls.Config{
					MinVersion: tls.VersionTLS13, RootCAs: authority.Pool(), ServerName: "127.0.0.1",
					Certificates: []tls.Certificate{client}, CurvePreferences: kx.curves,
				}
				if resume {
					clientCfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
				}
				for b.Loop() {
					c, err := tls.Dial("tcp", ln.Addr().String(), clientCfg)
					if err != nil {
						b.Fatal(err)
					}
					// The hub writes only once it verified the client's
					// certificate.
					var one [1]byte
					if _, err := c.Read(one[:]); err != nil {
						b.Fatal(err)
					}
					c.Close()
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handshakes/s")
			})
		}
	}
	ln.Close()
	wg.Wait()
}

// countingConn counts the TLS bytes an agent's connection carries.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// BenchmarkIdlePollBytes is what one unchanged long poll of an idle agent
// costs on the wire (TLS records, both directions, over HTTP/2), and what
// that makes an hour at the default poll hold (its mean: holds are drawn
// from 75–100 % of it). With TCP/IP headers and the keepalive exchanges
// (two bare segments each: the hub's every KeepAliveIdle, the agent's
// every hubclient.KeepAliveIdle) it is an idle agent's hour on the wire.
func BenchmarkIdlePollBytes(b *testing.B) {
	const hold = 20 * time.Millisecond
	h, authority, client, server := benchHub(b, hold)
	srv := serve.NewServer(serve.Config{
		Hub: h, CA: authority, Certificate: server, Logger: discard, PollTimeout: hold,
		Limits: serve.Limits{Rate: 1e6, Burst: 1e6},
	})
	ln, err := serve.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ln) })
	defer func() { srv.Close(); wg.Wait() }()
	var n atomic.Int64
	d := &net.Dialer{}
	tr, err := hubclient.NewHTTPS(hubclient.HTTPSConfig{
		URL: "https://" + ln.Addr().String(), CA: authority.Certificate(), Certificate: client,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{Conn: c, n: &n}, nil
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	inv := &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 16384, Drivers: []string{"sim"}}
	resp, err := tr.Sync(ctx, &protocol.SyncRequest{ProtocolVersion: protocol.Version, AgentVersion: "v1.0.0", Inventory: inv})
	if err != nil {
		b.Fatal(err)
	}
	// What an idle agent sends: its version and generations, no statuses,
	// no inventory (unchanged).
	req := &protocol.SyncRequest{
		ProtocolVersion: protocol.Version, AgentVersion: "v1.0.0", StoreID: resp.StoreID, Generation: resp.Generation,
		AppliedGeneration: resp.Generation, BootID: "0b3c1b2e-4c55-4d0e-9f3a-2f1b1d7a9e10", AgentStarted: time.Now().UTC(),
		Statuses: []protocol.Status{},
	}
	for range 3 { // the connection and its header tables warm up
		tr.Sync(ctx, req)
	}
	n.Store(0)
	segs := testnet.TCPOutSegs()
	b.ResetTimer()
	for b.Loop() {
		resp, err := tr.Sync(ctx, req)
		if err != nil || !resp.Unchanged {
			b.Fatalf("got %+v, %v; want unchanged", resp, err)
		}
	}
	b.StopTimer()
	perPoll := float64(n.Load()) / float64(b.N)
	meanHold := (1 + hub.MinHoldFraction) / 2 * hub.DefaultPollTimeout.Hours()
	b.ReportMetric(perPoll, "B/poll")
	b.ReportMetric(perPoll/meanHold/1000, "KB/h@hold")
	if segs >= 0 {
		// Both ends are on this host, so every segment either side sent
		// counts once. On a quiet host this is the poll's own.
		segsPerPoll := float64(testnet.TCPOutSegs()-segs) / float64(b.N)
		b.ReportMetric(segsPerPoll, "segs/poll")
		keepalives := time.Hour.Seconds()/serve.KeepAliveIdle.Seconds() + time.Hour.Seconds()/hubclient.KeepAliveIdle.Seconds()
		wire := (perPoll+segsPerPoll*testnet.WireHeader)/meanHold + keepalives*2*testnet.WireHeader
		b.ReportMetric(wire/1000, "wireKB/h@hold")
	}
}

func pemKey(k *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
