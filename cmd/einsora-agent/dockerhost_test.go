package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/internal/dockerhost"
)

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
