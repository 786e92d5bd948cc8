package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/protocol"
)

func syncServer(t *testing.T, h *testHub) *httptest.Server {
	// Tests name the machine in a header; over HTTPS it comes from the
	// client certificate.
	srv := httptest.NewServer(h.api.SyncHandler(func(r *http.Request) (string, error) {
		if id := r.Header.Get("X-Test-Machine"); id != "" {
			return id, nil
		}
		return "", errors.New("no client certificate")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSyncRefusesBadBodies(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	srv := syncServer(t, h)
	valid := `{"protocol_version":1,"generation":0,"statuses":[]}`
	tests := []struct {
		name    string
		machine string
		body    string
		want    int
	}{
		{"not_json", "m-1", "{nope", http.StatusBadRequest},
		{"empty", "m-1", "", http.StatusBadRequest},
		{"trailing_data", "m-1", valid + `{}`, http.StatusBadRequest},
		{"wrong_protocol", "m-1", `{"protocol_version":99}`, http.StatusBadRequest},
		{"negative_generation", "m-1", `{"protocol_version":1,"generation":-1}`, http.StatusBadRequest},
		{"bad_mode", "m-1", `{"protocol_version":1,"statuses":[{"workload":"w","mode":"explode"}]}`, http.StatusBadRequest},
		{"empty_workload_id", "m-1", `{"protocol_version":1,"statuses":[{"workload":""}]}`, http.StatusBadRequest},
		{"oversized", "m-1", `{"protocol_version":1,"agent_version":"` + strings.Repeat("x", protocol.MaxSyncBody) + `"}`, http.StatusRequestEntityTooLarge},
		{"no_identity", "", valid, http.StatusUnauthorized},
		{"unknown_machine", "m-nobody", valid, http.StatusForbidden},
		{"valid", "m-1", valid, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+protocol.SyncPath, strings.NewReader(tt.body))
			if tt.machine != "" {
				req.Header.Set("X-Test-Machine", tt.machine)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("got %d, want %d", resp.StatusCode, tt.want)
			}
			if tt.want >= 400 {
				var e adminapi.Error
				if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error == "" {
					t.Errorf("error answer without a message: %v", err)
				}
			}
		})
	}
}

func adminServer(t *testing.T, h *testHub) (*httptest.Server, *adminapi.Client) {
	srv := httptest.NewServer(h.api.AdminHandler("secret"))
	t.Cleanup(srv.Close)
	return srv, &adminapi.Client{BaseURL: srv.URL, Token: "secret"}
}

func TestAdminRefusesBadInput(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	srv, _ := adminServer(t, h)
	tests := []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"no_token", "GET", "/v1/workloads", "", "", http.StatusUnauthorized},
		{"wrong_token", "GET", "/v1/workloads", "nope", "", http.StatusUnauthorized},
		{"malformed_json", "POST", "/v1/workloads", "secret", "{", http.StatusBadRequest},
		{"unknown_field", "POST", "/v1/tenants", "secret", `{"name":"a","evil":1}`, http.StatusBadRequest},
		{"oversized", "POST", "/v1/tenants", "secret", `{"name":"` + strings.Repeat("a", 1<<20) + `"}`, http.StatusBadRequest},
		{"bad_tenant_name", "POST", "/v1/tenants", "secret", `{"name":"Not A Name"}`, http.StatusBadRequest},
		{"duplicate_tenant", "POST", "/v1/tenants", "secret", `{"name":"local"}`, http.StatusConflict},
		{"unknown_kind", "POST", "/v1/workloads", "secret", `{"tenant":"local","name":"w","kind":"spaceship","class":"cpu-1","region":"local"}`, http.StatusBadRequest},
		{"unknown_class", "POST", "/v1/workloads", "secret", `{"tenant":"local","name":"w","kind":"container","class":"huge","region":"local"}`, http.StatusBadRequest},
		{"unknown_tenant", "POST", "/v1/workloads", "secret", `{"tenant":"nobody","name":"w","kind":"container","class":"cpu-1","region":"local"}`, http.StatusBadRequest},
		{"unknown_workload", "GET", "/v1/workloads/w-nope", "secret", "", http.StatusNotFound},
		{"run_unknown_workload", "POST", "/v1/workloads/w-nope/run", "secret", "", http.StatusNotFound},
		{"bad_accelerator", "POST", "/v1/classes", "secret", `{"name":"x","accelerator":"tpu","devices":1,"cpus":1,"memory_mb":1}`, http.StatusBadRequest},
		{"valid_workload", "POST", "/v1/workloads", "secret", `{"tenant":"local","name":"w","kind":"container","class":"cpu-1","region":"local"}`, http.StatusCreated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, bytes.NewBufferString(tt.body))
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("got %d, want %d", resp.StatusCode, tt.want)
			}
			if tt.want >= 400 {
				var e adminapi.Error
				if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error == "" || strings.Contains(e.Error, "\n") {
					t.Errorf("want a one-line error message, got %q (%v)", e.Error, err)
				}
			}
		})
	}
}

func TestAdminClientRoundTrip(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	_, c := adminServer(t, h)
	ctx := t.Context()
	w, err := c.CreateWorkload(ctx, adminapi.CreateWorkload{Tenant: "local", Name: "web", Kind: "container", Class: "cpu-1", Region: "local"})
	if err != nil {
		t.Fatal(err)
	}
	h.pass()
	got, err := c.Workload(ctx, w.ID)
	if err != nil || got.State != "provisioning" || got.Machine != "m-1" {
		t.Fatalf("got %+v, %v", got, err)
	}
	ms, err := c.Machines(ctx)
	if err != nil || len(ms) != 1 || !ms[0].Online || ms[0].DesiredGeneration == 0 {
		t.Fatalf("machines: got %+v, %v", ms, err)
	}
	cs, err := c.Classes(ctx)
	if err != nil || len(cs) != 6 {
		t.Fatalf("classes: got %d, %v; want the 6 defaults", len(cs), err)
	}
	if err := c.Act(ctx, w.ID, "rm"); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Workload(ctx, w.ID); got.State != "deleting" {
		t.Errorf("after rm: got %s, want deleting", got.State)
	}
}
