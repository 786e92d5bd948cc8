package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/protocol"
)

// A hub started without AllowSim refuses the syncs of machines that offer
// the sim driver, by the inventory they send or the one it stored, with
// one line the agent's owner can act on; with AllowSim it accepts them.
func TestSimDriverRefusedUnlessAllowed(t *testing.T) {
	allowing := newTestHub(t) // AllowSim, as every test hub
	for _, id := range []string{"m-sim", "m-real", "m-stored"} {
		if err := allowing.EnsureTenant(t.Context(), "local"); err != nil {
			t.Fatal(err)
		}
		if err := allowing.RegisterMachine(t.Context(), id, id, "local", "local"); err != nil {
			t.Fatal(err)
		}
	}
	sync := func(h *testHub, id, body string) (int, string) {
		t.Helper()
		srv := syncServer(t, h)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+protocol.SyncPath, strings.NewReader(body))
		req.Header.Set("X-Test-Machine", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e adminapi.Error
		json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error
	}
	simInv := `{"protocol_version":1,"inventory":{"os":"linux","arch":"amd64","cpus":4,"memory_mb":4096,"drivers":["sim"]}}`
	realInv := `{"protocol_version":1,"inventory":{"os":"linux","arch":"amd64","cpus":4,"memory_mb":4096,"drivers":["docker"]}}`
	if code, msg := sync(allowing, "m-stored", simInv); code != http.StatusOK {
		t.Fatalf("AllowSim: got %d %q, want 200", code, msg)
	}

	// The same store, served by a hub without AllowSim.
	h, err := hub.New(context.Background(), hub.Config{Store: allowing.st, Clock: allowing.clk, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	refusing := &testHub{Hub: h, api: New(h, allowing.clk, quiet()), t: t, clk: allowing.clk, st: allowing.st}
	for _, tt := range []struct {
		id, body string
		want     int
	}{
		{"m-sim", simInv, http.StatusForbidden},
		{"m-stored", `{"protocol_version":1}`, http.StatusForbidden},
		{"m-real", realInv, http.StatusOK},
	} {
		code, msg := sync(refusing, tt.id, tt.body)
		if code != tt.want {
			t.Errorf("%s: got %d %q, want %d", tt.id, code, msg, tt.want)
		}
		if tt.want == http.StatusForbidden && msg != hub.ErrSimRefused.Error() {
			t.Errorf("%s: got message %q, want %q", tt.id, msg, hub.ErrSimRefused)
		}
	}
	if m, err := refusing.Machine(t.Context(), "m-sim"); err != nil || m.Inventory != nil {
		t.Errorf("the refused inventory was stored: %+v, %v", m.Inventory, err)
	}
}
