package postgres

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/httpapi"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// A user's log request held by replica A reaches the machine whose poll
// replica B holds, through the store's notifications, and names A's URL:
// the machine uploads straight to A over mutual TLS (its certificate, the
// CA it pins, A's name), and A's reader gets the lines (issue 18).
func TestLogsAskedOnOneReplicaUploadedToIt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	authority, err := ca.Open(ca.Options{Dir: t.TempDir()})
	must(t, err)
	serverCert, err := authority.ServerCertificate([]string{"localhost"})
	must(t, err)
	// Each replica's agent API, as serve has it, on loopback under the
	// name its certificate covers.
	listen := func() (net.Listener, string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		return ln, "https://localhost:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	}
	lnA, urlA := listen()
	lnB, urlB := listen()
	serveAgents := func(h *hub.Hub, ln net.Listener) {
		identify := func(r *http.Request) (string, error) {
			if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
				return "", errors.New("no client certificate")
			}
			return ca.MachineID(r.TLS.VerifiedChains[0][0])
		}
		mux := http.NewServeMux()
		mux.Handle(protocol.LogsPath, httpapi.New(h, nil, log).LogsHandler(identify))
		srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{serverCert},
			ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: authority.Pool(), MinVersion: tls.VersionTLS13}}
		go srv.ServeTLS(ln, "", "")
		t.Cleanup(func() { srv.Close() })
	}
	a, b, w, first := placedOnReplicas(t, ctx, urlA, urlB)
	serveAgents(a, lnA)
	serveAgents(b, lnB)

	// The machine polls B, and only B, as a load balancer sent it there;
	// its transport's hub is B.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	must(t, err)
	csr, err := x509.ParseCertificateRequest(csrDER)
	must(t, err)
	certPEM, _, err := authority.SignMachine(csr, "m-1")
	must(t, err)
	blk, _ := pem.Decode(certPEM)
	tr, err := hubclient.NewHTTPS(hubclient.HTTPSConfig{URL: urlB, CA: authority.Certificate(),
		Certificate: tls.Certificate{Certificate: [][]byte{blk.Bytes}, PrivateKey: key}})
	must(t, err)
	defer tr.Close()
	asked := make(chan protocol.LogRequest, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		req := &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: first.StoreID, Generation: first.Generation}
		for ctx.Err() == nil {
			resp, err := b.Sync(ctx, "m-1", req)
			if err != nil {
				return
			}
			if len(resp.Logs) > 0 {
				asked <- resp.Logs[0]
				return
			}
			req = &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: resp.StoreID, Generation: resp.Generation}
		}
	})
	time.Sleep(100 * time.Millisecond) // let the poll reach its wait on B

	type result struct {
		lines []string
		err   error
	}
	read := make(chan result, 1)
	go func() {
		var r result
		r.err = a.WorkloadLogs(ctx, w.ID, hub.LogOptions{Tail: 10}, func(l protocol.LogLine) error {
			r.lines = append(r.lines, l.Line)
			return nil
		})
		read <- r
	}()
	var req protocol.LogRequest
	select {
	case req = <-asked:
	case r := <-read:
		t.Fatalf("B never handed A's log request to the machine: %v", r.err)
	}
	if req.Workload != w.ID || req.Tail != 10 || req.URL != urlA {
		t.Fatalf("the machine was asked %+v, want workload %s, tail 10, URL %s", req, w.ID, urlA)
	}
	var body strings.Builder
	for i, l := range []string{"one", "two"} {
		q, _ := json.Marshal(l)
		fmt.Fprintf(&body, `{"t":"2026-12-01T10:00:0%dZ","s":"stdout","l":%s}`+"\n", i, q)
	}
	// As the agent does: to the request's URL, else to its hub (B).
	if err := tr.UploadLogsTo(ctx, req.URL, req.Token, strings.NewReader(body.String())); err != nil {
		t.Fatalf("upload to %q: %v", req.URL, err)
	}
	r := <-read
	if r.err != nil || strings.Join(r.lines, ",") != "one,two" {
		t.Fatalf("A's reader got %q, %v", r.lines, r.err)
	}
}

// placedOnReplicas starts replicas A and B (at urlA, urlB) on one new
// database, machine m-1 having sent its first sync to B, and returns them
// once the workload it creates is placed on m-1. They run until ctx ends
// or the test is over.
func placedOnReplicas(tb testing.TB, ctx context.Context, urlA, urlB string) (a, b *hub.Hub, w store.Workload, first *protocol.SyncResponse) {
	tb.Helper()
	t := tb
	var err error
	dsn := testDSN(tb)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(ctx)
	newHub := func(holder, url string) *hub.Hub {
		h, err := hub.New(ctx, hub.Config{AllowSim: true, Store: open(t, dsn), Logger: log, HolderID: holder, URL: url,
			PollTimeout: time.Minute, ControllerInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a, b = newHub("hub-a", urlA), newHub("hub-b", urlB)
	// A loaded test machine must not turn a slow hand-out into a miss.
	a.SetLogLimits(20*time.Second, 0)
	b.SetLogLimits(20*time.Second, 0)
	must(t, a.CreateTenant(ctx, "local"))
	must(t, a.RegisterMachine(ctx, "m-1", "m-1", "local", "local"))
	inv := &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 8, MemoryMB: 16384, Drivers: []string{"sim"}}
	first, err = b.Sync(ctx, "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version, Inventory: inv})
	must(t, err)
	done := make(chan struct{}, 2)
	for _, h := range []*hub.Hub{a, b} {
		go func() { h.Run(ctx); done <- struct{}{} }()
	}
	tb.Cleanup(func() { cancel(); <-done; <-done })

	w, err = a.CreateWorkload(ctx, hub.WorkloadSpec{Tenant: "local", Name: "web", Kind: protocol.KindContainer, Class: "cpu-1", Region: "local"})
	must(t, err)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := a.Workload(ctx, w.ID)
		must(t, err)
		if got.Machine == "m-1" {
			return a, b, got, first
		}
		if time.Now().After(deadline) {
			t.Fatalf("workload not placed: %s", got.State)
		}
	}
}

// BenchmarkLogRequestAcrossReplicas times a user's log request on
// replica A, from the call to its end (one line, no follow), with the
// machine's poll held on A itself (the baseline, as with one replica) and
// on B (the request crosses the store's notifications, the upload goes to
// A's URL). The upload is AcceptLogs in-process: what is timed is the
// hand-out, not TLS.
func BenchmarkLogRequestAcrossReplicas(b *testing.B) {
	for _, poller := range []string{"same_replica", "other_replica"} {
		b.Run(poller, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const urlA, urlB = "https://hub-a.test:8443", "https://hub-b.test:8443"
			a, rb, w, first := placedOnReplicas(b, ctx, urlA, urlB)
			polled := rb
			if poller == "same_replica" {
				polled = a
			}
			byURL := map[string]*hub.Hub{urlA: a, urlB: rb}
			line := `{"t":"2026-12-01T10:00:00Z","s":"stdout","l":"hello"}` + "\n"
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			wg.Go(func() {
				req := &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: first.StoreID, Generation: first.Generation}
				for ctx.Err() == nil {
					resp, err := polled.Sync(ctx, "m-1", req)
					if err != nil {
						return
					}
					for _, l := range resp.Logs {
						to := polled
						if l.URL != "" {
							to = byURL[l.URL]
						}
						wg.Go(func() { to.AcceptLogs(ctx, "m-1", l.Token, strings.NewReader(line)) })
					}
					req = &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: resp.StoreID, Generation: resp.Generation}
				}
			})
			time.Sleep(100 * time.Millisecond) // the poll waits
			var took []time.Duration
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				n := 0
				err := a.WorkloadLogs(ctx, w.ID, hub.LogOptions{}, func(protocol.LogLine) error { n++; return nil })
				if err != nil || n != 1 {
					b.Fatalf("%d lines, %v", n, err)
				}
				took = append(took, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
