package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/internal/dockerhost"
	"einsora.dev/edge/inventory"
)

// TestInventoryOnResolvedEndpoint: the inventory asks the engine the
// resolver chose, here Colima's socket in a home of the test's, not the
// machine's own /var/run/docker.sock.
func TestInventoryOnResolvedEndpoint(t *testing.T) {
	dir, err := os.MkdirTemp("", "di")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, ".colima", "default", "docker.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_ping", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("OK")) })
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"Platform":{"Name":"Docker Engine - Community"},"Components":[{"Name":"Engine","Version":"27.4.1"}],"Version":"27.4.1","ApiVersion":"1.47"}`))
	})
	mux.HandleFunc("GET /info", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"Runtimes":{"runc":{}}}`)) })
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	defer srv.Close()

	ep := dockerhost.Resolve(dockerhost.Env{Home: dir, Getenv: func(string) string { return "" }})
	if ep.Host != "unix://"+sock {
		t.Fatalf("resolved %+v, want Colima's socket", ep)
	}
	inv := inventory.New(inventoryOptions(ep)).Probe(context.Background())
	if inv.Docker == nil || inv.Docker.Version != "27.4.1" || inv.Docker.Kind != "docker" {
		t.Errorf("got docker %+v, want the served 27.4.1", inv.Docker)
	}
}

// TestDoctorNamesDockerEndpoint: doctor says which endpoint and why, and
// warns when its socket is not there.
func TestDoctorNamesDockerEndpoint(t *testing.T) {
	dir, err := os.MkdirTemp("", "dd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, ".colima", "default", "docker.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ep := dockerhost.Resolve(dockerhost.Env{Home: dir, IsSocket: func(p string) bool {
		fi, err := os.Stat(p)
		return strings.HasPrefix(p, dir) && err == nil && fi.Mode().Type() == os.ModeSocket
	}})
	c := dockerHostCheck(ep)(context.Background())
	if c.Verdict != agent.OK || !strings.Contains(c.Detail, sock) || !strings.Contains(c.Detail, "Colima") {
		t.Errorf("got %+v, want ok naming %s and Colima", c, sock)
	}
	l.Close()
	os.Remove(sock)
	c = dockerHostCheck(ep)(context.Background())
	if c.Verdict != agent.Warn || c.Fix == "" {
		t.Errorf("socket gone: got %+v, want a warning with a fix", c)
	}
	if o := inventoryOptions(dockerhost.Endpoint{Host: "unix:///var/run/docker.sock", Default: true}); o.DockerHost != "" {
		t.Errorf("default endpoint given to the inventory as %q, want it left to the prober", o.DockerHost)
	}
}

// TestDoctorBundle: doctor --bundle writes the checks and an inventory
// capture.
func TestDoctorBundle(t *testing.T) {
	dir := t.TempDir()
	checks := []agent.Check{{Name: "state dir", Verdict: agent.OK, Detail: "fine"}}
	if err := writeBundle(context.Background(), dir, inventory.New(inventory.Options{}), checks); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"doctor.json", "inventory/MANIFEST.txt", "inventory/inventory.json"} {
		if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
			t.Errorf("bundle lacks %s: %v", want, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "doctor.json"))
	if !strings.Contains(string(b), `"state dir"`) {
		t.Errorf("doctor.json: %s", b)
	}
}
