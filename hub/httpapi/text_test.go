package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"einsora.dev/edge/hub/adminapi"
)

// Every field the admin API stores refuses control and format characters
// with a 400 naming the field, and nothing is stored.
func TestAdminRefusesControlCharacters(t *testing.T) {
	h := newTestHub(t)
	srv := httptest.NewServer(h.api.AdminHandler("secret"))
	t.Cleanup(srv.Close)
	post := func(path string, body any) (int, string) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e adminapi.Error
		json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error
	}
	if code, msg := post("/v1/tenants", adminapi.CreateTenant{Name: "acme"}); code != http.StatusCreated {
		t.Fatalf("tenant: %d %s", code, msg)
	}
	good := adminapi.CreateWorkload{Tenant: "acme", Name: "web", Kind: "container", Class: "cpu-1", Region: "local", Image: "sim:"}
	bad := []string{"\x1b[31m", "\x00", "\u0085", "\u202e", "\u200b", "\x7f", "\xff"}
	tests := []struct {
		field string
		path  string
		body  func(s string) any
	}{
		{"name", "/v1/tenants", func(s string) any { return adminapi.CreateTenant{Name: "x" + s} }},
		{"image", "/v1/workloads", func(s string) any { w := good; w.Image = "sim:" + s; return w }},
		{"name", "/v1/workloads", func(s string) any { w := good; w.Name = "web" + s; return w }},
		{"region", "/v1/workloads", func(s string) any { w := good; w.Region = s + "local"; return w }},
		{"tenant", "/v1/workloads", func(s string) any { w := good; w.Tenant = "acme" + s; return w }},
		{"class", "/v1/workloads", func(s string) any { w := good; w.Class = "cpu-1" + s; return w }},
		{"accelerator", "/v1/classes", func(s string) any {
			return adminapi.Class{Name: "big", Accelerator: "none" + s, CPUs: 1, MemoryMB: 1}
		}},
		{"owner", "/v1/tokens", func(s string) any { return adminapi.CreateToken{Owner: "acme" + s, Region: "r1"} }},
	}
	for _, tt := range tests {
		for _, s := range bad {
			code, msg := post(tt.path, tt.body(s))
			if code != http.StatusBadRequest || !strings.Contains(msg, `field "`+tt.field+`"`) {
				t.Errorf("%s %s with %q: got %d %q, want 400 naming the field", tt.path, tt.field, s, code, msg)
			}
		}
	}
	ws, err := h.Workloads(t.Context())
	if err != nil || len(ws) != 0 {
		t.Errorf("refused workloads were stored: %v, %v", ws, err)
	}
	if code, msg := post("/v1/workloads", good); code != http.StatusCreated {
		t.Errorf("a plain workload: %d %s", code, msg)
	}
}
