package serve_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/serve"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/hubclient"
)

// runHub runs serve.Run on loopback until the test ends.
func runHub(t *testing.T, region string) (data, adminURL, agentURL string) {
	t.Helper()
	data = t.TempDir()
	ready := make(chan [2]string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve.Run(ctx, serve.Options{
			DataDir: data, Listen: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", Region: region, Logger: discard, Version: "v9.9.9",
			Hub:   hub.Config{PollTimeout: time.Second, AllowSim: true},
			Ready: func(a, b string) { ready <- [2]string{a, b} },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve.Run: %v", err)
		}
	})
	select {
	case u := <-ready:
		return data, u[0], u[1]
	case err := <-done:
		t.Fatalf("serve.Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the hub did not start")
	}
	return
}

func scrape(t *testing.T, adminURL string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// value is the sample of family name whose labels include want; -1 if none.
func value(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if labels[want[i]] != want[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func TestMetricsAfterAWorkloadsLife(t *testing.T) {
	data, adminURL, agentURL := runHub(t, "eu")
	token, err := hub.LoadOrCreateAdminToken(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := &adminapi.Client{BaseURL: adminURL, Token: token}
	if err := c.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	tok, err := c.CreateToken(ctx, "acme", "eu", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := agent.Enroll(ctx, agent.EnrollOptions{StateDir: dir, HubURL: agentURL, Token: tok.Token}); err != nil {
		t.Fatal(err)
	}
	nw, err := agent.OpenNetwork(dir, agent.NetworkOptions{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nw.Transport().Close)
	a := startAgent(t, dir, nw, hubclient.Backoff{})
	w, err := c.CreateWorkload(ctx, adminapi.CreateWorkload{Tenant: "acme", Name: "web", Kind: "container", Class: "cpu-1", Region: "eu", Image: "sim:"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the workload to run", func() bool {
		got, err := c.Workload(ctx, w.ID)
		return err == nil && got.State == "running"
	})
	if err := c.Act(ctx, w.ID, "rm"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the workload to go", func() bool {
		_, err := c.Workload(ctx, w.ID)
		return err != nil
	})

	fams := scrape(t, adminURL)
	for _, c := range []struct {
		name   string
		labels []string
		min    float64
		max    float64
	}{
		{"einsora_hub_syncs_total", []string{"result", "ok"}, 2, 1e9},
		{"einsora_hub_enrolments_total", []string{"result", "ok"}, 1, 1},
		{"einsora_hub_machines", []string{"state", "online", "region", "eu"}, 1, 1},
		{"einsora_hub_leader", []string{"region", "eu"}, 1, 1},
		{"einsora_hub_store_commit_seconds", nil, 3, 1e9},
		{"einsora_hub_tls_handshakes_total", nil, 2, 1e9},
		{"einsora_hub_long_polls", nil, 0, 1},
		{"einsora_hub_requests_queued", nil, 0, 0},
		{"einsora_hub_wake_latency_seconds", nil, 1, 1e9},
		{"einsora_hub_admit_pass_seconds", nil, 1, 1e9},
		{"einsora_hub_placements_total", []string{"outcome", "placed", "reason", "none"}, 1, 1},
		{"einsora_hub_build_info", []string{"version", "v9.9.9"}, 1, 1},
		{"einsora_hub_statuses_dropped_total", nil, 0, 1e9},
	} {
		if v := value(fams, c.name, c.labels...); v < c.min || v > c.max {
			t.Errorf("%s%v = %v, want in [%v, %v]", c.name, c.labels, v, c.min, c.max)
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), a.MachineID()) || strings.Contains(l.GetValue(), w.ID) {
					t.Errorf("%s has a label per machine or workload: %s=%s", name, l.GetName(), l.GetValue())
				}
			}
		}
	}

	if err := c.RevokeMachine(ctx, a.MachineID()); err != nil {
		t.Fatal(err)
	}
	// A fresh handshake with the revoked machine's certificate.
	authority, err := ca.Open(ca.Options{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(agentURL, "https://"), &tls.Config{
		RootCAs: authority.Pool(), MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*nw.Transport().Certificate()},
	})
	if err == nil {
		// TLS 1.3: the client learns of the refusal at its first read.
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil {
		t.Error("a revoked machine's handshake was accepted")
	}
	fams = scrape(t, adminURL)
	if v := value(fams, "einsora_hub_tls_refusals_total", "cause", "certificate"); v < 1 {
		t.Errorf("certificate refusals = %v, want at least 1", v)
	}
	if v := value(fams, "einsora_hub_revocations_total"); v != 1 {
		t.Errorf("revocations = %v, want 1", v)
	}
	if v := value(fams, "einsora_hub_machines", "state", "revoked", "region", "eu"); v != 1 {
		t.Errorf("revoked machines = %v, want 1", v)
	}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHealthEndpoints(t *testing.T) {
	data, adminURL, agentURL := runHub(t, "eu")
	if code, body := get(t, http.DefaultClient, adminURL+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	waitFor(t, 20*time.Second, "/readyz on the admin listener", func() bool {
		code, body := get(t, http.DefaultClient, adminURL+"/readyz")
		return code == http.StatusOK && strings.Contains(body, "leading controller:eu")
	})
	authority, err := ca.Open(ca.Options{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	// No client certificate: a load balancer's probe.
	lb := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: authority.Pool(), MinVersion: tls.VersionTLS13}}}
	if code, body := get(t, lb, agentURL+"/readyz"); code != http.StatusOK || !strings.Contains(body, "ready") {
		t.Errorf("/readyz on the agents' port: %d %q", code, body)
	}
	if code, _ := get(t, lb, agentURL+"/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics on the agents' port: %d, want 404 (it stays on the admin listener)", code)
	}
	if code, _ := get(t, http.DefaultClient, adminURL+"/v1/machines"); code != http.StatusUnauthorized {
		t.Errorf("admin API without the token: %d, want 401", code)
	}
	if code, body := get(t, http.DefaultClient, adminURL+"/"); code != http.StatusOK || !strings.Contains(body, "Admin token") {
		t.Errorf("GET / on the admin listener: %d, want the dashboard's sign-in", code)
	}
}

type fixedLeader bool

func (f fixedLeader) Leadership() (bool, <-chan struct{}) { return bool(f), nil }

func TestReadyzOnAStandby(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &serve.Health{Store: st, Leader: fixedLeader(false), Lease: "controller:eu", Clock: clock.NewFake(now)}
	check := func(wantCode int, want string) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.Readyz(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != wantCode || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/readyz: %d %q, want %d and %q", rec.Code, rec.Body, wantCode, want)
		}
	}
	check(http.StatusServiceUnavailable, "no hub holds controller:eu")
	put := func(expires time.Time) {
		err := st.Update(ctx, func(tx store.Tx) error {
			return tx.PutLease(store.Lease{Name: "controller:eu", Holder: "hub-b", Epoch: 1, Expires: expires})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	put(now.Add(10 * time.Second))
	check(http.StatusOK, "standby; controller:eu is held by hub-b")
	put(now.Add(-time.Second))
	check(http.StatusServiceUnavailable, "no hub holds")
	h.Leader = fixedLeader(true)
	check(http.StatusOK, "leading")
	st.Close()
	check(http.StatusServiceUnavailable, "the store does not answer")
}
