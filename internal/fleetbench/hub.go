package fleetbench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

const (
	benchTenant = "bench"
	benchRegion = "local"
)

// hubTarget is real einsora-hub serve processes listening on loopback:
// one on SQLite in a temporary directory, or replicas on one PostgreSQL
// database (store), each with a copy of the first one's data directory.
type hubTarget struct {
	bin, dir, store string
	// args are flags each serve process gets beyond its own.
	args []string
	reps []*replica
	// ids are the change phase's workloads, one per cycle.
	ids []string
	// burstBatch is how many workloads the burst creates a call; 1 or
	// less is a call each.
	burstBatch int
}

// replica is one einsora-hub serve process.
type replica struct {
	dir           string
	listen, admin string
	agentURL      string
	p             *process
	api           *adminapi.Client
}

// newHubTarget makes a target of n hub processes, each given args; store
// is "" for SQLite (then n is 1) or a PostgreSQL URL.
func newHubTarget(bin, dir, store string, n int, args []string, burstBatch int) *hubTarget {
	h := &hubTarget{bin: bin, dir: dir, store: store, args: args, burstBatch: burstBatch}
	for i := range max(n, 1) {
		h.reps = append(h.reps, &replica{dir: filepath.Join(dir, fmt.Sprintf("r%d", i)), listen: "127.0.0.1:0", admin: "127.0.0.1:0"})
	}
	return h
}

func (h *hubTarget) name() string {
	switch {
	case h.store == "":
		return "einsora-hub serve"
	case len(h.reps) == 1:
		return "einsora-hub serve, PostgreSQL"
	}
	return fmt.Sprintf("%d replicas, PostgreSQL", len(h.reps))
}

func (h *hubTarget) urls() []string {
	us := make([]string, len(h.reps))
	for i, r := range h.reps {
		us[i] = r.agentURL
	}
	return us
}

func (h *hubTarget) procs() []*process {
	ps := make([]*process, len(h.reps))
	for i, r := range h.reps {
		ps[i] = r.p
	}
	return ps
}

// crash kills replica i with SIGKILL: the whole hub, or one of several
// replicas.
func (h *hubTarget) crash(i int) { h.reps[i].p.kill() }

// restart starts replica i again where its agents know to find it.
func (h *hubTarget) restart(i int) error { return h.startReplica(i) }

func (h *hubTarget) stop() {
	for _, r := range h.reps {
		r.p.kill()
	}
}

// start starts every replica: the first makes the data directory (CA,
// server certificate, admin token) and the others start on copies of it,
// as docs/operations.md sets replicas up. Those files are written before
// the hub says where it listens, so a copy taken then is whole.
func (h *hubTarget) start() error {
	for i, r := range h.reps {
		if i > 0 {
			if err := copyDir(filepath.Join(h.reps[0].dir, "data"), filepath.Join(r.dir, "data")); err != nil {
				h.stop()
				return fmt.Errorf("copy the first replica's data directory: %w", err)
			}
		}
		if err := h.startReplica(i); err != nil {
			h.stop()
			return fmt.Errorf("replica %d: %w (its log: %s)", i, err, filepath.Join(r.dir, "hub.log"))
		}
	}
	return nil
}

func (h *hubTarget) startReplica(i int) error {
	r := h.reps[i]
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return err
	}
	if len(h.reps) > 1 && r.listen == "127.0.0.1:0" {
		// --url is this replica's own URL, which it publishes: it needs
		// its port before it starts.
		port, err := freePort()
		if err != nil {
			return err
		}
		r.listen = "127.0.0.1:" + port
	}
	args := []string{"serve", "--data", filepath.Join(r.dir, "data"), "--listen", r.listen, "--admin", r.admin, "--region", benchRegion, "--allow-sim"}
	args = append(args, h.args...)
	if h.store != "" {
		args = append(args, "--store", h.store)
	}
	if len(h.reps) > 1 {
		args = append(args, "--url", "https://"+r.listen)
	}
	p, line, err := startProcess(exec.Command(h.bin, args...), filepath.Join(r.dir, "hub.log"), "agents connect to")
	if err != nil {
		return err
	}
	r.p = p
	adminURL, agentURL := fieldAfter(line, "admin API on "), fieldAfter(line, "agents connect to ")
	au, err1 := url.Parse(adminURL)
	gu, err2 := url.Parse(agentURL)
	if err1 != nil || err2 != nil || au.Host == "" || gu.Host == "" {
		p.kill()
		return fmt.Errorf("the hub said %q: no admin and agent URLs", line)
	}
	// A restart listens where the agents know to find it.
	r.admin, r.listen, r.agentURL = au.Host, gu.Host, agentURL
	tok, err := os.ReadFile(filepath.Join(r.dir, "data", "admin-token"))
	if err != nil {
		p.kill()
		return fmt.Errorf("read the hub's admin token: %w", err)
	}
	r.api = &adminapi.Client{BaseURL: adminURL, Token: strings.TrimSpace(string(tok))}
	return nil
}

// freePort is a loopback port nobody listened on a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	return port, err
}

// copyDir copies the regular files of src into a new dst, modes kept
// (ca.key, server.key and admin-token are 0600).
func copyDir(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, info.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

// creds enrols n machines, each with its own single-use token, its own key
// and its own source address, through hubclient's enrolment: the real
// protocol, machine i through replica i mod the replicas. Making the
// tokens is not timed; the enrolments are.
func (h *hubTarget) creds(ctx context.Context, n int, m *meter) ([]cred, time.Duration, error) {
	api := h.reps[0].api
	if err := api.CreateTenant(ctx, benchTenant); err != nil {
		var se *adminapi.StatusError
		if !errors.As(err, &se) || se.Code != 409 {
			return nil, 0, fmt.Errorf("create tenant: %w", err)
		}
	}
	toks := make([]string, n)
	if err := parallel(ctx, n, 8, func(i int) error {
		t, err := api.CreateToken(ctx, benchTenant, benchRegion, time.Hour)
		toks[i] = t.Token
		return err
	}); err != nil {
		return nil, 0, fmt.Errorf("create tokens: %w", err)
	}
	cs := make([]cred, n)
	start := time.Now()
	err := parallel(ctx, n, 16, func(i int) error {
		c, err := enrolOne(ctx, h.reps[i%len(h.reps)].agentURL, toks[i], m.dialer(i))
		cs[i] = c
		return err
	})
	took := time.Since(start)
	if err != nil {
		return nil, 0, fmt.Errorf("enrol: %w", err)
	}
	return cs, took, nil
}

func enrolOne(ctx context.Context, hubURL, token string, dial dialFunc) (cred, error) {
	tok, err := protocol.ParseToken(token)
	if err != nil {
		return cred{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return cred{}, err
	}
	var raw [16]byte
	rand.Read(raw[:])
	id := "m-" + hex.EncodeToString(raw[:])
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: id}}, key)
	if err != nil {
		return cred{}, err
	}
	csr := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	var resp *protocol.CertificateResponse
	// The hub may shed load (429, 503): its Retry-After is honoured,
	// a bounded number of times.
	for try := 0; ; try++ {
		resp, err = hubclient.EnrollVia(ctx, dial, hubURL, tok.Fingerprint, &protocol.EnrollRequest{Token: token, CSR: string(csr), MachineID: id, Name: id})
		var he *hubclient.HubError
		if err == nil || try == 5 || !errors.As(err, &he) || he.RetryAfter == 0 {
			break
		}
		time.Sleep(he.RetryAfter)
	}
	if err != nil {
		return cred{}, err
	}
	certBlock, _ := pem.Decode([]byte(resp.Certificate))
	caBlock, _ := pem.Decode([]byte(resp.CA))
	if certBlock == nil || caBlock == nil {
		return cred{}, errors.New("the hub's answer holds no PEM certificate or CA")
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		return cred{}, err
	}
	return cred{cert: tls.Certificate{Certificate: [][]byte{certBlock.Bytes}, PrivateKey: key}, ca: ca}, nil
}

func (h *hubTarget) change(ctx context.Context, k, via int) (string, protocol.Mode, error) {
	api := h.reps[via].api
	switch k % 3 {
	case 0:
		w, err := api.CreateWorkload(ctx, adminapi.CreateWorkload{
			Tenant: benchTenant, Name: fmt.Sprintf("change-%d", k/3), Kind: string(protocol.KindContainer),
			Class: "cpu-1", Region: benchRegion, Image: "sim:",
		})
		if err != nil {
			return "", "", err
		}
		h.ids = append(h.ids, w.ID)
		return w.ID, protocol.ModeRun, nil
	case 1:
		id := h.ids[k/3]
		return id, protocol.ModePark, api.Act(ctx, id, "park")
	default:
		id := h.ids[k/3]
		return id, protocol.ModeRun, api.Act(ctx, id, "run")
	}
}

func (h *hubTarget) burst(ctx context.Context, n int) ([]string, error) {
	ids := make([]string, n)
	create := func(i int) adminapi.CreateWorkload {
		return adminapi.CreateWorkload{
			Tenant: benchTenant, Name: fmt.Sprintf("burst-%d", i), Kind: string(protocol.KindContainer),
			Class: "cpu-1", Region: benchRegion, Image: "sim:",
		}
	}
	if h.burstBatch <= 1 {
		// One admin call a workload, 16 at a time.
		err := parallel(ctx, n, 16, func(i int) error {
			w, err := h.reps[i%len(h.reps)].api.CreateWorkload(ctx, create(i))
			ids[i] = w.ID
			return err
		})
		return ids, err
	}
	// A batch a call, as `workload create --file` sends them, one call
	// at a time to each replica.
	batches := (n + h.burstBatch - 1) / h.burstBatch
	err := parallel(ctx, batches, len(h.reps), func(b int) error {
		start, end := b*h.burstBatch, min((b+1)*h.burstBatch, n)
		cws := make([]adminapi.CreateWorkload, 0, end-start)
		for i := start; i < end; i++ {
			cws = append(cws, create(i))
		}
		out, err := h.reps[b%len(h.reps)].api.CreateWorkloads(ctx, cws)
		if err != nil {
			return err
		}
		if len(out.Workloads) != len(cws) {
			return fmt.Errorf("batch of %d answered with %d workloads", len(cws), len(out.Workloads))
		}
		for i, w := range out.Workloads {
			ids[start+i] = w.ID
		}
		return nil
	})
	return ids, err
}

// reached counts the polls the replicas hold now, from their counters
// (long_polls, the gauge einsora_hub_long_polls without a scrape: the
// scrape counts the fleet from the store, and ten a second were a sixth
// of a restarted hub's CPU at N=10,000): the hub writes a quiet sync's last_sync
// only in its presence batch (every 15 s), so last_sync would measure the
// batch, not the agents. A replica that does not answer (the crashed one,
// starting) holds none. Every agent is back when the sum is N.
func (h *hubTarget) reached(ctx context.Context, _ time.Time) (int, error) {
	sum, answered := 0, 0
	var last error
	for _, r := range h.reps {
		n, err := longPolls(ctx, r.api)
		if err != nil {
			last = err
			continue
		}
		sum += n
		answered++
	}
	if answered == 0 {
		return 0, last
	}
	return sum, nil
}

func (h *hubTarget) liveHeap(ctx context.Context) (int64, error) {
	var sum int64
	for i, r := range h.reps {
		n, err := liveHeap(ctx, r.api.BaseURL, r.api.Token)
		if err != nil {
			return 0, fmt.Errorf("replica %d: %w", i, err)
		}
		sum += n
	}
	return sum, nil
}

// longPolls reads how many polls a hub holds, from GET /v1/counters.
func longPolls(ctx context.Context, api *adminapi.Client) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := api.Counters(ctx)
	if err != nil {
		return 0, err
	}
	return c.LongPolls, nil
}

// parallel runs fn(0..n-1) on at most width goroutines and returns the
// first error.
func parallel(ctx context.Context, n, width int, fn func(i int) error) error {
	var mu sync.Mutex
	var first error
	next := make(chan int)
	var wg sync.WaitGroup
	for range width {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%d: %w", i, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
