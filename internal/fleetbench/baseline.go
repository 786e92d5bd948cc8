package fleetbench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"einsora.dev/edge/internal/parkconn"
	"einsora.dev/edge/protocol"
)

// BaselineEnv names the directory of the baseline's certificates; a
// fleetbench process started with it set serves the baseline instead.
const BaselineEnv = "FLEETBENCH_BASELINE_DIR"

// baselineHold is the baseline's poll hold, the hub's default.
const baselineHold = 25 * time.Second

// baselineTarget is the stock Go TLS long poll: net/http over HTTP/2 with
// mutual TLS, one map of machines, a wake channel each, nothing stored. It
// speaks the sync path's JSON so the same hubclient drives both.
type baselineTarget struct {
	self, dir     string
	park          bool
	listen, admin string
	agentURL      string
	adminURL      string
	p             *process
	ca            *x509.Certificate
	caKey         *ecdsa.PrivateKey
}

// newBaselineTarget is the baseline; with park, the same server parking
// its held polls, which its agents reach over HTTP/1.1 (parkPoll).
func newBaselineTarget(self, dir string, park bool) *baselineTarget {
	return &baselineTarget{self: self, dir: dir, park: park, listen: "127.0.0.1:0", admin: "127.0.0.1:0"}
}

func (b *baselineTarget) name() string {
	if b.park {
		return "Go TLS long poll, parked (HTTP/1.1)"
	}
	return "stock Go TLS long poll"
}

// http1Only: a parked poll is HTTP/1.1's, whose connection can be taken.
func (b *baselineTarget) http1Only() bool { return b.park }

func (b *baselineTarget) urls() []string    { return []string{b.agentURL} }
func (b *baselineTarget) procs() []*process { return []*process{b.p} }
func (b *baselineTarget) crash(int)         { b.p.kill() }
func (b *baselineTarget) restart(int) error { return b.start() }
func (b *baselineTarget) stop()             { b.p.kill() }

func (b *baselineTarget) start() error {
	if b.ca == nil {
		if err := b.makeCA(); err != nil {
			return err
		}
	}
	cmd := exec.Command(b.self)
	cmd.Env = append(os.Environ(), BaselineEnv+"="+b.dir, "FLEETBENCH_LISTEN="+b.listen, "FLEETBENCH_ADMIN="+b.admin)
	if b.park {
		cmd.Env = append(cmd.Env, ParkEnv+"=1")
	}
	p, line, err := startProcess(cmd, filepath.Join(b.dir, "baseline.log"), "baseline: admin on")
	if err != nil {
		return err
	}
	b.p = p
	b.admin, b.listen = fieldAfter(line, "admin on "), fieldAfter(line, "agents on ")
	b.agentURL, b.adminURL = "https://"+b.listen, "http://"+b.admin
	return nil
}

// makeCA makes the baseline's CA and server certificate, in b.dir.
func (b *baselineTarget) makeCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fleetbench baseline CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	b.ca, _ = x509.ParseCertificate(der)
	b.caKey = key
	srv, err := b.issue("127.0.0.1", x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srv.PrivateKey)
	if err != nil {
		return err
	}
	var chain []byte
	for _, c := range srv.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c})...)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "server.pem"), chain, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.dir, "server-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
}

// issue makes a leaf for cn, chained to the CA; a server's names cn.
func (b *baselineTarget) issue(cn string, usage x509.ExtKeyUsage) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if ip := net.ParseIP(cn); ip != nil && usage == x509.ExtKeyUsageServerAuth {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, b.ca, &key.PublicKey, b.caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der, b.ca.Raw}, PrivateKey: key}, nil
}

func (b *baselineTarget) creds(ctx context.Context, n int, _ *meter) ([]cred, time.Duration, error) {
	cs := make([]cred, n)
	for i := range cs {
		c, err := b.issue(strconv.Itoa(i), x509.ExtKeyUsageClientAuth)
		if err != nil {
			return nil, 0, err
		}
		cs[i] = cred{cert: c, ca: b.ca}
	}
	return cs, 0, nil
}

func (b *baselineTarget) post(ctx context.Context, path string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.adminURL+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("baseline %s: %s", path, resp.Status)
	}
	return nil
}

// change wakes machine k with workload b-(k/3) in the cycle's mode.
func (b *baselineTarget) change(ctx context.Context, k, _ int) (string, protocol.Mode, error) {
	mode := protocol.ModeRun
	if k%3 == 1 {
		mode = protocol.ModePark
	}
	id := fmt.Sprintf("b-%d", k/3)
	return id, mode, b.post(ctx, fmt.Sprintf("/change?machine=%d&id=%s&mode=%s", k/3, id, mode))
}

// reached counts the machines whose sync reached it since since.
func (b *baselineTarget) reached(ctx context.Context, since time.Time) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/reached?since=%d", b.adminURL, since.UnixNano()), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(body)))
}

func (b *baselineTarget) liveHeap(ctx context.Context) (int64, error) {
	return liveHeap(ctx, b.adminURL, "")
}

func (b *baselineTarget) burst(ctx context.Context, n int) ([]string, error) {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("burst-%d", i)
	}
	return ids, b.post(ctx, "/burst")
}

// baseline is the baseline server's state: machines by their certificate's
// name.
type baseline struct {
	mu       sync.Mutex
	machines map[string]*baseMachine
	// park makes the server park its held polls over HTTP/1.1; parked
	// are those parked now, and back takes their connections back to
	// net/http once answered.
	park   bool
	parked map[*parkedPoll]struct{}
	back   *parkconn.Listener
	// hold is how long a poll is held; closed ends the parking (tests).
	hold   time.Duration
	closed chan struct{}
}

func newBaseline(park bool) *baseline {
	return &baseline{
		machines: map[string]*baseMachine{}, park: park, parked: map[*parkedPoll]struct{}{},
		hold: baselineHold, closed: make(chan struct{}),
	}
}

type baseMachine struct {
	seen   time.Time
	gen    int64
	ws     []protocol.DesiredWorkload
	wake   chan struct{}
	parked *parkedPoll
}

func (s *baseline) machine(name string) *baseMachine {
	m := s.machines[name]
	if m == nil {
		m = &baseMachine{gen: 1, wake: make(chan struct{})}
		s.machines[name] = m
	}
	return m
}

// setLocked gives machine name workload id in mode and wakes its poll.
func (s *baseline) setLocked(name, id string, mode protocol.Mode) {
	m := s.machine(name)
	m.gen++
	m.ws = []protocol.DesiredWorkload{{ID: id, Attempt: 1, Mode: mode, Kind: protocol.KindContainer, Driver: "sim", Image: "sim:"}}
	close(m.wake)
	m.wake = make(chan struct{})
	if m.parked != nil {
		go s.release(m.parked)
	}
}

// answer is m's answer to an agent that has generation have.
func answer(m *baseMachine, have int64) protocol.SyncResponse {
	if m.gen == have {
		return protocol.SyncResponse{StoreID: "baseline", Generation: have, Unchanged: true}
	}
	return protocol.SyncResponse{StoreID: "baseline", Generation: m.gen, Workloads: m.ws}
}

func (s *baseline) sync(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		http.Error(w, "no client certificate", http.StatusUnauthorized)
		return
	}
	var req protocol.SyncRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	name := r.TLS.PeerCertificates[0].Subject.CommonName
	s.mu.Lock()
	m := s.machine(name)
	m.seen = time.Now()
	gen, wake, hold := m.gen, m.wake, s.hold
	s.mu.Unlock()
	if req.Generation == gen {
		if s.park && s.parkPoll(w, r, m, gen) {
			return
		}
		t := time.NewTimer(hold)
		select {
		case <-wake:
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
	}
	s.mu.Lock()
	resp := answer(m, req.Generation)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// server is the baseline's agent server, with the server certificate
// cert and the agents' CA pool.
func (s *baseline) server(cert tls.Certificate, pool *x509.CertPool) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+protocol.SyncPath, s.sync)
	return &http.Server{Handler: mux, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS13,
	}}
}

// ServeBaseline serves the baseline until killed, with the certificates
// in dir; it prints where it listens.
func ServeBaseline(dir string) error {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(cert.Certificate[len(cert.Certificate)-1])
	if err != nil {
		return fmt.Errorf("the baseline's CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	s := newBaseline(os.Getenv(ParkEnv) == "1")
	srv := s.server(cert, pool)
	ln, err := net.Listen("tcp", os.Getenv("FLEETBENCH_LISTEN"))
	if err != nil {
		return err
	}
	if s.park {
		s.serveParked(srv, ln.Addr())
	}
	adm := http.NewServeMux()
	adm.HandleFunc("POST /change", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.setLocked(r.URL.Query().Get("machine"), r.URL.Query().Get("id"), protocol.Mode(r.URL.Query().Get("mode")))
		s.mu.Unlock()
	})
	adm.HandleFunc("POST /burst", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		for name := range s.machines {
			s.setLocked(name, "burst-"+name, protocol.ModeRun)
		}
		s.mu.Unlock()
	})
	adm.HandleFunc("GET /reached", func(w http.ResponseWriter, r *http.Request) {
		ns, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
		n := 0
		s.mu.Lock()
		for _, m := range s.machines {
			if m.seen.UnixNano() >= ns {
				n++
			}
		}
		s.mu.Unlock()
		fmt.Fprintln(w, n)
	})
	// The live heap, read as from the hub's admin API.
	adm.Handle("GET /debug/pprof/heap", pprof.Handler("heap"))
	aln, err := net.Listen("tcp", os.Getenv("FLEETBENCH_ADMIN"))
	if err != nil {
		return err
	}
	go http.Serve(aln, adm)
	fmt.Printf("baseline: admin on %s, agents on %s\n", aln.Addr(), ln.Addr())
	return srv.ServeTLS(ln, "", "")
}
