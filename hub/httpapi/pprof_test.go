package httpapi

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// The hub's Go profiles are the operators' alone: behind the admin token.
func TestProfilesNeedTheAdminToken(t *testing.T) {
	h := newTestHub(t)
	srv, _ := adminServer(t, h)
	for _, tt := range []struct {
		token string
		code  int
	}{{"", http.StatusUnauthorized}, {"wrong", http.StatusUnauthorized}, {"secret", http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/debug/pprof/goroutine?debug=1", nil)
		if tt.token != "" {
			req.Header.Set("Authorization", "Bearer "+tt.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.code {
			t.Errorf("token %q: got %d, want %d", tt.token, resp.StatusCode, tt.code)
		}
		if got := strings.Contains(string(body), "goroutine profile"); got != (tt.code == http.StatusOK) {
			t.Errorf("token %q: the body shows a profile: %v", tt.token, got)
		}
	}
}
