package inventory

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"einsora.dev/edge/protocol"
)

// serveDocker serves the Engine API's /version and /info from testdata
// files ("" for a 500) on a unix socket, and returns the socket's path.
func serveDocker(t *testing.T, versionFile, infoFile string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(file string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if file == "" {
				http.Error(w, "engine trouble", http.StatusInternalServerError)
				return
			}
			data, err := os.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Error(err)
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write(data)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /version", serve(versionFile))
	mux.Handle("GET /info", serve(infoFile))
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestProbeDocker(t *testing.T) {
	tests := []struct {
		name       string
		host       func(t *testing.T) string
		wantDocker *protocol.Docker
		wantNote   string
	}{
		{"engine_with_nvidia_and_runsc", func(t *testing.T) string {
			return "unix://" + serveDocker(t, "docker-version.json", "docker-info-runtimes-nvidia-runsc.json")
		}, &protocol.Docker{Version: "27.3.1", Kind: "docker", Platform: "Docker Engine - Community", Runtimes: []string{"io.containerd.runc.v2", "nvidia", "runc", "runsc"}}, ""},
		{"bare_socket_path", func(t *testing.T) string {
			return serveDocker(t, "docker-version.json", "docker-info-runtimes-nvidia-runsc.json")
		}, &protocol.Docker{Version: "27.3.1", Kind: "docker", Platform: "Docker Engine - Community", Runtimes: []string{"io.containerd.runc.v2", "nvidia", "runc", "runsc"}}, ""},
		{"info_fails_version_kept", func(t *testing.T) string {
			return "unix://" + serveDocker(t, "docker-version.json", "")
		}, &protocol.Docker{Version: "27.3.1", Kind: "docker", Platform: "Docker Engine - Community"}, "docker: docker /info: 500 Internal Server Error"},
		{"version_fails", func(t *testing.T) string {
			return "unix://" + serveDocker(t, "", "")
		}, nil, "docker: docker /version: 500 Internal Server Error"},
		{"named_socket_missing", func(t *testing.T) string {
			return "unix://" + filepath.Join(t.TempDir(), "docker.sock")
		}, nil, "docker: docker /version: "},
		{"unsupported_scheme", func(t *testing.T) string { return "ssh://me@host" }, nil, `docker: docker host "ssh://me@host": unsupported scheme`},
		// Engines told apart by /version, shaped like real answers.
		{"podman_5", func(t *testing.T) string {
			return "unix://" + serveDocker(t, "docker-version-podman-5.json", "docker-info-podman-5.json")
		}, &protocol.Docker{Version: "5.4.1", Kind: "podman", Platform: "linux/amd64/fedora-41", Runtimes: []string{"crun", "crun-vm", "runc", "runsc"}}, ""},
		{"docker_desktop", func(t *testing.T) string {
			return "unix://" + serveDocker(t, "docker-version-desktop.json", "docker-info-runtimes-nvidia-runsc.json")
		}, &protocol.Docker{Version: "27.5.1", Kind: "docker-desktop", Platform: "Docker Desktop 4.38.0 (181591)", Runtimes: []string{"io.containerd.runc.v2", "nvidia", "runc", "runsc"}}, ""},
		{"docker_desktop_master_reported_as_such", func(t *testing.T) string {
			return "unix://" + serveDocker(t, "docker-version-desktop-master.json", "docker-info-runtimes-nvidia-runsc.json")
		}, &protocol.Docker{Version: "master", Kind: "docker-desktop", Platform: "Docker Desktop 4.40.0 (186969)", Runtimes: []string{"io.containerd.runc.v2", "nvidia", "runc", "runsc"}}, ""},
		{"engine_without_platform", func(t *testing.T) string {
			return "unix://" + serveDocker(t, "docker-version-engine-only.json", "docker-info-runtimes-nvidia-runsc.json")
		}, &protocol.Docker{Version: "26.1.5+dfsg1", Kind: "docker", Runtimes: []string{"io.containerd.runc.v2", "nvidia", "runc", "runsc"}}, ""},
		{"default_socket_missing_is_no_docker", func(t *testing.T) string { return "" }, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(Options{Root: t.TempDir(), DockerHost: tt.host(t)})
			p.probers = []prober{{"docker", probeDocker}}
			inv := p.Probe(context.Background())
			if !reflect.DeepEqual(inv.Docker, tt.wantDocker) {
				t.Errorf("got docker %+v, want %+v", inv.Docker, tt.wantDocker)
			}
			notes := strings.Join(inv.Notes, "\n")
			if (tt.wantNote == "") != (notes == "") || !strings.HasPrefix(notes, tt.wantNote) {
				t.Errorf("got notes %q, want one starting %q", notes, tt.wantNote)
			}
		})
	}
}

// TestProbeDockerDefaultSocketUnderRoot finds the engine at
// /var/run/docker.sock under Root, as an agent in a container that mounts
// the host's root would.
func TestProbeDockerDefaultSocketUnderRoot(t *testing.T) {
	sock := serveDocker(t, "docker-version.json", "docker-info-runtimes-nvidia-runsc.json")
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "var/run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sock, filepath.Join(root, "var/run/docker.sock")); err != nil {
		t.Fatal(err)
	}
	p := New(Options{Root: root})
	p.probers = []prober{{"docker", probeDocker}}
	inv := p.Probe(context.Background())
	if inv.Docker == nil || inv.Docker.Version != "27.3.1" {
		t.Errorf("got docker %+v, want version 27.3.1", inv.Docker)
	}
}
