package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"einsora.dev/edge/protocol"
)

// Over HTTP, a newer agent is refused with both versions named, and an
// answer says which version the hub speaks, for the agent's own check.
func TestSyncOverHTTPNamesTheHubsVersion(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	srv := syncServer(t, h)
	post := func(body string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+protocol.SyncPath, strings.NewReader(body))
		req.Header.Set("X-Test-Machine", "m-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, body := post(`{"protocol_version":` + strconv.Itoa(protocol.Version+1) + `}`)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "version "+strconv.Itoa(protocol.Version+1)) ||
		!strings.Contains(string(body), "hub's "+strconv.Itoa(protocol.Version)) {
		t.Errorf("a newer agent: %d %s, want 400 naming both versions", code, body)
	}
	code, body = post(`{"protocol_version":` + strconv.Itoa(protocol.Version) + `,"generation":0,"statuses":[]}`)
	var resp protocol.SyncResponse
	if err := json.Unmarshal(body, &resp); code != http.StatusOK || err != nil {
		t.Fatalf("a current agent: %d %s (%v)", code, body, err)
	}
	if resp.ProtocolVersion != protocol.Version {
		t.Errorf("the answer says protocol version %d, want %d", resp.ProtocolVersion, protocol.Version)
	}
}
