package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/protocol"
)

// hostile holds what must never reach a terminal raw: ESC (with a screen
// clearing sequence), NUL, NEL, a right-to-left override, a zero-width
// space and DEL.
const hostile = "\x1b[2J\x00\u0085\u202e\u200b\x7f"

func hostileHub(t *testing.T) string {
	t.Helper()
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	mux := http.NewServeMux()
	answer := func(v any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(v) }
	}
	// A workload stored before the admin API refused control characters.
	w := adminapi.Workload{ID: "w-1", Name: "web" + hostile, Tenant: "acme", Kind: "container", Class: "cpu-1",
		Region: "local", Image: "sim:" + hostile, State: "failed", Reason: "why" + hostile, Created: now, Since: now}
	mux.HandleFunc("GET /v1/workloads/w-1", answer(w))
	mux.HandleFunc("GET /v1/workloads", answer([]adminapi.Workload{w}))
	mux.HandleFunc("GET /v1/workloads/w-1/timeline", answer([]adminapi.TimelineEntry{{At: now, Text: "line" + hostile}}))
	// What a machine reported, had it passed the hub's own stripping.
	m := adminapi.Machine{ID: "m-1", Name: "box" + hostile, Owner: "acme", Region: "local", AgentVersion: "1.0" + hostile,
		OS: "linux", Arch: "amd64", Drivers: []string{"sim" + hostile},
		Inventory: &protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 4, Drivers: []string{"sim" + hostile}}}
	mux.HandleFunc("GET /v1/machines/m-1", answer(m))
	mux.HandleFunc("GET /v1/machines", answer([]adminapi.Machine{m}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestShowNeverPrintsControlCharacters(t *testing.T) {
	url := hostileHub(t)
	t.Setenv("EINSORA_ADMIN_TOKEN", "secret")
	for _, args := range [][]string{
		{"workload", "show", "w-1"},
		{"workload", "ls"},
		{"workload", "timeline", "w-1"},
		{"machine", "show", "m-1"},
		{"machine", "ls"},
	} {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args, "--hub", url))
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		got := out.String()
		for _, r := range "\x1b\x00\u0085\u202e\u200b\x7f" {
			if strings.ContainsRune(got, r) {
				t.Errorf("%v printed %U raw:\n%q", args, r, got)
			}
		}
		if !strings.Contains(got, "[2J") {
			t.Errorf("%v: the printable rest of the text went too:\n%s", args, got)
		}
	}
}
