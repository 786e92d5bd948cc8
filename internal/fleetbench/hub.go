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

// hubTarget is a real einsora-hub serve on SQLite in a temporary
// directory, listening on loopback.
type hubTarget struct {
	bin, dir      string
	listen, admin string
	agentURL      string
	p             *process
	api           *adminapi.Client
	// ids are the change phase's workloads, one per cycle.
	ids []string
}

func newHubTarget(bin, dir string) *hubTarget {
	return &hubTarget{bin: bin, dir: dir, listen: "127.0.0.1:0", admin: "127.0.0.1:0"}
}

func (h *hubTarget) name() string { return "einsora-hub serve" }
func (h *hubTarget) url() string  { return h.agentURL }
func (h *hubTarget) pid() int     { return h.p.cmd.Process.Pid }
func (h *hubTarget) kill()        { h.p.kill() }

func (h *hubTarget) start() error {
	cmd := exec.Command(h.bin, "serve", "--data", filepath.Join(h.dir, "data"), "--listen", h.listen, "--admin", h.admin, "--region", benchRegion, "--allow-sim")
	p, line, err := startProcess(cmd, filepath.Join(h.dir, "hub.log"), "agents connect to")
	if err != nil {
		return err
	}
	h.p = p
	adminURL, agentURL := fieldAfter(line, "admin API on "), fieldAfter(line, "agents connect to ")
	au, err1 := url.Parse(adminURL)
	gu, err2 := url.Parse(agentURL)
	if err1 != nil || err2 != nil || au.Host == "" || gu.Host == "" {
		p.kill()
		return fmt.Errorf("the hub said %q: no admin and agent URLs", line)
	}
	// A restart listens where the agents know to find it.
	h.admin, h.listen, h.agentURL = au.Host, gu.Host, agentURL
	tok, err := os.ReadFile(filepath.Join(h.dir, "data", "admin-token"))
	if err != nil {
		p.kill()
		return fmt.Errorf("read the hub's admin token: %w", err)
	}
	h.api = &adminapi.Client{BaseURL: adminURL, Token: strings.TrimSpace(string(tok))}
	return nil
}

// creds enrols n machines, each with its own single-use token, its own key
// and its own source address, through hubclient's enrolment: the real
// protocol. Making the tokens is not timed; the enrolments are.
func (h *hubTarget) creds(ctx context.Context, n int, m *meter) ([]cred, time.Duration, error) {
	if err := h.api.CreateTenant(ctx, benchTenant); err != nil {
		var se *adminapi.StatusError
		if !errors.As(err, &se) || se.Code != 409 {
			return nil, 0, fmt.Errorf("create tenant: %w", err)
		}
	}
	toks := make([]string, n)
	if err := parallel(ctx, n, 8, func(i int) error {
		t, err := h.api.CreateToken(ctx, benchTenant, benchRegion, time.Hour)
		toks[i] = t.Token
		return err
	}); err != nil {
		return nil, 0, fmt.Errorf("create tokens: %w", err)
	}
	cs := make([]cred, n)
	start := time.Now()
	err := parallel(ctx, n, 16, func(i int) error {
		c, err := enrolOne(ctx, h.agentURL, toks[i], m.dialer(i))
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

func (h *hubTarget) change(ctx context.Context, k int) (string, protocol.Mode, error) {
	switch k % 3 {
	case 0:
		w, err := h.api.CreateWorkload(ctx, adminapi.CreateWorkload{
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
		return id, protocol.ModePark, h.api.Act(ctx, id, "park")
	default:
		id := h.ids[k/3]
		return id, protocol.ModeRun, h.api.Act(ctx, id, "run")
	}
}

func (h *hubTarget) burst(ctx context.Context, n int) ([]string, error) {
	ids := make([]string, n)
	err := parallel(ctx, n, 16, func(i int) error {
		w, err := h.api.CreateWorkload(ctx, adminapi.CreateWorkload{
			Tenant: benchTenant, Name: fmt.Sprintf("burst-%d", i), Kind: string(protocol.KindContainer),
			Class: "cpu-1", Region: benchRegion, Image: "sim:",
		})
		ids[i] = w.ID
		return err
	})
	return ids, err
}

// reached counts the machines whose last sync the hub recorded after
// since. It relies on the hub writing last_sync when a poll arrives.
func (h *hubTarget) reached(ctx context.Context, since time.Time) (int, error) {
	ms, err := h.api.Machines(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range ms {
		if m.LastSync != nil && !m.LastSync.Before(since) {
			n++
		}
	}
	return n, nil
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
