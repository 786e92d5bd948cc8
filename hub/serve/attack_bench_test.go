package serve_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/serve"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

var (
	attackAgents = flag.Int("attack.agents", 500, "idle enrolled agents in BenchmarkAttacks")
	attackFor    = flag.Duration("attack.for", 5*time.Second, "how long each phase of BenchmarkAttacks runs")
)

// BenchmarkAttacks runs the attacks of the hostile-network tests at once
// (slow enrolment bodies, silent ClientHellos, silent connections, each
// from 10 loopback sources) against a hub with the default limits and many
// idle enrolled agents waiting in their polls, and measures 20 legitimate
// machines' syncs (4 a second each, under their rate) first without the
// attack and then during it. It runs once whatever -benchtime says:
//
//	go test ./hub/serve -run '^$' -bench Attacks -benchtime 1x -attack.agents 1000
func BenchmarkAttacks(b *testing.B) {
	if _, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		b.Skipf("this system cannot use 127.0.0.2 as a source address: %v", err)
	}
	dir, authority, st := serve.NewCAAndStore(b)
	h, err := hub.New(context.Background(), hub.Config{AllowSim: true, Store: st, CA: authority, Logger: discard, PollTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	cert, err := authority.ServerCertificate([]string{"127.0.0.1"})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := serve.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := serve.NewServer(serve.Config{Hub: h, CA: authority, Certificate: cert, Logger: discard, PollTimeout: time.Minute})
	var served sync.WaitGroup
	served.Go(func() { srv.Serve(ln) })
	defer func() { srv.Close(); served.Wait() }()
	url := "https://" + ln.Addr().String()
	ctx := context.Background()
	h.EnsureTenant(ctx, "acme")

	const legitMachines = 20
	n := *attackAgents + legitMachines
	trs := make([]*hubclient.HTTPS, n)
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		if err := h.RegisterMachine(ctx, id, id, "acme", "local"); err != nil {
			b.Fatal(err)
		}
		trs[i] = benchTransport(b, authority, url, id)
		defer trs[i].Close()
	}
	// The idle agents wait in their polls, as a quiet fleet does.
	pollCtx, stopPolls := context.WithCancel(ctx)
	var polls sync.WaitGroup
	defer func() { stopPolls(); polls.Wait() }()
	for _, tr := range trs[legitMachines:] {
		polls.Go(func() {
			// Connecting all at once from one address, some are shed
			// (closed at accept, or refused at the ClientHello) and
			// come back after a jittered backoff, as agents do.
			req := &protocol.SyncRequest{ProtocolVersion: protocol.Version}
			for range 1000 {
				resp, err := tr.Sync(pollCtx, req)
				if pollCtx.Err() != nil {
					return
				}
				if err != nil {
					time.Sleep(mrand.N(time.Second))
					continue
				}
				req = &protocol.SyncRequest{ProtocolVersion: protocol.Version, StoreID: resp.StoreID, Generation: resp.Generation}
			}
		})
	}
	deadline := time.Now().Add(time.Minute)
	for h.WaitingPolls() < *attackAgents && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	b.ResetTimer()

	base := legitPhase(trs[:legitMachines], *attackFor)
	rssBase := rssMB()

	refusedBefore := srv.Stats().Refused
	dbBefore := fileSize(filepath.Join(dir, "hub.db"), filepath.Join(dir, "hub.db-wal"))
	hello := benchHello(authority)
	stop := make(chan struct{})
	var dials atomic.Int64
	var attack sync.WaitGroup
	for src := range 10 {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+src))}, Timeout: 5 * time.Second}
		for kind := range 3 {
			for range 10 {
				attack.Go(func() { attacker(d, ln.Addr().String(), authority, kind, hello, stop, &dials) })
			}
		}
	}
	start := time.Now()
	under := legitPhase(trs[:legitMachines], *attackFor)
	rssUnder := rssMB()
	close(stop)
	attack.Wait()
	elapsed := time.Since(start)
	b.StopTimer()

	st2 := srv.Stats()
	fmt.Fprintf(os.Stderr, "BenchmarkAttacks: %d idle agents waiting, %d legitimate machines, GOMAXPROCS %d, %s a phase\n",
		h.WaitingPolls(), legitMachines, runtime.GOMAXPROCS(0), *attackFor)
	fmt.Fprintf(os.Stderr, "  %-15s %9s %9s %9s %9s %12s %14s\n", "phase", "syncs", "success", "p50", "p99", "process RSS", "attacker conn/s")
	fmt.Fprintf(os.Stderr, "  %-15s %9d %8.2f%% %9s %9s %9d MB %14s\n", "baseline", base.total, base.success(), base.p(50), base.p(99), rssBase, "-")
	fmt.Fprintf(os.Stderr, "  %-15s %9d %8.2f%% %9s %9s %9d MB %14.0f\n", "under attack", under.total, under.success(), under.p(50), under.p(99), rssUnder,
		float64(dials.Load())/elapsed.Seconds())
	fmt.Fprintf(os.Stderr, "  under attack: %d connections closed at accept, hub.db and WAL %d KB -> %d KB; first failure: %v\n",
		st2.Refused-refusedBefore, dbBefore>>10, fileSize(filepath.Join(dir, "hub.db"), filepath.Join(dir, "hub.db-wal"))>>10, under.firstErr)
	b.ReportMetric(under.success(), "%success")
	b.ReportMetric(float64(under.p(99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(dials.Load())/elapsed.Seconds(), "attack-conn/s")
}

type phase struct {
	total, ok int
	lat       []time.Duration
	firstErr  error
}

func (p phase) success() float64 { return 100 * float64(p.ok) / float64(max(p.total, 1)) }

func (p phase) p(q int) time.Duration {
	if len(p.lat) == 0 {
		return 0
	}
	return p.lat[min(len(p.lat)*q/100, len(p.lat)-1)].Round(100 * time.Microsecond)
}

// legitPhase has each machine sync (answered at once) every 250 ms for d.
func legitPhase(trs []*hubclient.HTTPS, d time.Duration) phase {
	var mu sync.Mutex
	var p phase
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for _, tr := range trs {
		wg.Go(func() {
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				_, err := tr.Sync(ctx, &protocol.SyncRequest{ProtocolVersion: protocol.Version})
				took := time.Since(start)
				cancel()
				mu.Lock()
				p.total++
				if err == nil {
					p.ok++
					p.lat = append(p.lat, took)
				} else if p.firstErr == nil {
					p.firstErr = err
				}
				mu.Unlock()
				time.Sleep(250*time.Millisecond - min(took, 250*time.Millisecond))
			}
		})
	}
	wg.Wait()
	slices.Sort(p.lat)
	return p
}

// attacker runs one attack of kind 0 (slow enrolment body), 1 (silent
// ClientHello) or 2 (silent connection) over and over until stop.
func attacker(d *net.Dialer, addr string, authority *ca.CA, kind int, hello []byte, stop <-chan struct{}, dials *atomic.Int64) {
	for range 100_000 {
		select {
		case <-stop:
			return
		default:
		}
		dials.Add(1)
		raw, err := d.Dial("tcp", addr)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		raw.SetDeadline(time.Now().Add(20 * time.Second))
		done := make(chan struct{})
		go func() {
			select {
			case <-stop:
			case <-done:
			}
			raw.Close()
		}()
		switch kind {
		case 0:
			c := tls.Client(raw, &tls.Config{RootCAs: authority.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", protocol.EnrollPath, 16<<10)
			go func() { // a byte every second until the hub gives up
				for range 16 << 10 {
					if _, err := c.Write([]byte{' '}); err != nil {
						return
					}
					time.Sleep(time.Second)
				}
			}()
			if resp, err := readResponse(c); err == nil {
				resp.Close()
			}
		case 1, 2:
			if kind == 1 {
				raw.Write(hello)
			}
			io.Copy(io.Discard, raw)
		}
		close(done)
	}
}

func readResponse(c net.Conn) (io.Closer, error) {
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/") {
		return nil, fmt.Errorf("no answer: %w", err)
	}
	return c, nil
}

func benchHello(authority *ca.CA) []byte {
	rc := &recordConn{}
	tls.Client(rc, &tls.Config{RootCAs: authority.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}).Handshake()
	return rc.written
}

func benchTransport(b *testing.B, authority *ca.CA, url, id string) *hubclient.HTTPS {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: id}}, key)
	csr, _ := x509.ParseCertificateRequest(der)
	certPEM, _, err := authority.SignMachine(csr, id)
	if err != nil {
		b.Fatal(err)
	}
	tc, err := tls.X509KeyPair(certPEM, pemKey(key))
	if err != nil {
		b.Fatal(err)
	}
	tr, err := hubclient.NewHTTPS(hubclient.HTTPSConfig{URL: url, CA: authority.Certificate(), Certificate: tc})
	if err != nil {
		b.Fatal(err)
	}
	return tr
}

// rssMB is this process's resident memory (hub and clients together) in
// MB, or 0 where /proc is not there.
func rssMB() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
			return kb / 1024
		}
	}
	return 0
}

func fileSize(paths ...string) int64 {
	var n int64
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		}
	}
	return n
}
