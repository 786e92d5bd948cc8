package dockerhost

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// home is a temporary home directory where sockets and docker's config are
// made by the test.
type home struct {
	t   *testing.T
	dir string
	env map[string]string
}

func newHome(t *testing.T) *home {
	// Short: a unix socket path is limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "dh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &home{t: t, dir: dir, env: map[string]string{}}
}

// listen makes a real unix socket at rel under the home.
func (h *home) listen(rel string) string {
	h.t.Helper()
	path := filepath.Join(h.dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { l.Close() })
	return path
}

func (h *home) write(rel, content string) {
	h.t.Helper()
	path := filepath.Join(h.dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// context writes a docker context named name with endpoint host, and makes
// it current.
func (h *home) context(name, host string) {
	sum := sha256.Sum256([]byte(name))
	h.write(".docker/contexts/meta/"+hex.EncodeToString(sum[:])+"/meta.json",
		`{"Name":"`+name+`","Metadata":{"Description":"made by a test"},"Endpoints":{"docker":{"Host":"`+host+`","SkipTLSVerify":false}}}`)
	h.write(".docker/config.json", `{"auths":{},"currentContext":"`+name+`"}`)
}

// resolve resolves in this home; sockets outside it (the machine's own
// /var/run/docker.sock) do not count.
func (h *home) resolve(flag string) Endpoint {
	return Resolve(Env{
		Flag:   flag,
		Getenv: func(k string) string { return h.env[k] },
		Home:   h.dir,
		IsSocket: func(p string) bool {
			return strings.HasPrefix(p, h.dir) && isSocket(p)
		},
	})
}

func TestResolveOrder(t *testing.T) {
	h := newHome(t)
	if ep := h.resolve(""); !ep.Default || ep.Host != "unix:///var/run/docker.sock" {
		t.Errorf("nothing: got %+v, want the default system socket", ep)
	}

	h.env["XDG_RUNTIME_DIR"] = filepath.Join(h.dir, "run")
	rootless := h.listen("run/docker.sock")
	if ep := h.resolve(""); ep.Host != "unix://"+rootless || !strings.Contains(ep.Why, "rootless Docker") {
		t.Errorf("rootless: got %+v", ep)
	}
	colima := h.listen(".colima/default/docker.sock")
	if ep := h.resolve(""); ep.Host != "unix://"+colima || !strings.Contains(ep.Why, "Colima") {
		t.Errorf("colima: got %+v", ep)
	}
	desktop := h.listen(".docker/run/docker.sock")
	if ep := h.resolve(""); ep.Host != "unix://"+desktop || !strings.Contains(ep.Why, "Docker Desktop") || ep.Default {
		t.Errorf("desktop: got %+v", ep)
	}
	h.context("colima", "unix://"+colima)
	if ep := h.resolve(""); ep.Host != "unix://"+colima || ep.Why != `docker context "colima"` {
		t.Errorf("context: got %+v", ep)
	}
	h.env["DOCKER_HOST"] = "tcp://127.0.0.1:2375"
	if ep := h.resolve(""); ep.Host != "tcp://127.0.0.1:2375" || ep.Why != "DOCKER_HOST" {
		t.Errorf("DOCKER_HOST: got %+v", ep)
	}
	if ep := h.resolve(desktop); ep.Host != "unix://"+desktop || !strings.Contains(ep.Why, "--docker-host") {
		t.Errorf("flag: got %+v", ep)
	}
}

func TestResolveContexts(t *testing.T) {
	h := newHome(t)
	desktop := h.listen(".docker/run/docker.sock")

	// "default" is no context at all: the sockets are looked at.
	h.write(".docker/config.json", `{"currentContext":"default"}`)
	if ep := h.resolve(""); ep.Host != "unix://"+desktop {
		t.Errorf("default context: got %+v", ep)
	}
	// A context whose meta.json is gone is skipped, and said so.
	h.write(".docker/config.json", `{"currentContext":"gone"}`)
	if ep := h.resolve(""); ep.Host != "unix://"+desktop || !strings.Contains(ep.Why, `docker context "gone" skipped`) {
		t.Errorf("missing context: got %+v", ep)
	}
	// DOCKER_CONTEXT wins over config.json, and DOCKER_CONFIG moves it.
	h.context("desktop-linux", "unix://"+desktop)
	h.env["DOCKER_CONFIG"] = filepath.Join(h.dir, "elsewhere")
	if ep := h.resolve(""); ep.Host != "unix://"+desktop || strings.Contains(ep.Why, "context") {
		t.Errorf("DOCKER_CONFIG without a context: got %+v", ep)
	}
	delete(h.env, "DOCKER_CONFIG")
	h.context("podman", "unix:///run/user/1000/podman/podman.sock")
	h.env["DOCKER_CONTEXT"] = "desktop-linux"
	if ep := h.resolve(""); ep.Why != `docker context "desktop-linux"` {
		t.Errorf("DOCKER_CONTEXT: got %+v", ep)
	}
	// A meta.json too big to be one is refused.
	sum := sha256.Sum256([]byte("huge"))
	h.write(".docker/contexts/meta/"+hex.EncodeToString(sum[:])+"/meta.json", strings.Repeat(" ", maxMeta+1))
	h.env["DOCKER_CONTEXT"] = "huge"
	if ep := h.resolve(""); !strings.Contains(ep.Why, "over") {
		t.Errorf("huge meta.json: got %+v", ep)
	}
}

func TestResolveBarePath(t *testing.T) {
	if ep := Resolve(Env{Flag: "/tmp/x.sock"}); ep.Host != "unix:///tmp/x.sock" {
		t.Errorf("got %+v", ep)
	}
}
