// Package dockerhost chooses the one Docker Engine endpoint the agent uses,
// for its inventory and its Docker driver alike, and says why. The order:
//
//  1. the --docker-host flag or the config file's docker_host;
//  2. DOCKER_HOST;
//  3. the current docker context (DOCKER_CONTEXT, else currentContext in
//     $DOCKER_CONFIG/config.json, ~/.docker by default): the docker
//     endpoint in contexts/meta/<sha256 of the name>/meta.json;
//  4. the first known socket that exists: Docker Desktop
//     (~/.docker/run/docker.sock), Colima's default profile
//     (~/.colima/default/docker.sock), rootless Docker
//     ($XDG_RUNTIME_DIR/docker.sock), the system socket
//     (/var/run/docker.sock), then Podman's (rootless
//     $XDG_RUNTIME_DIR/podman/podman.sock, rootful /run/podman/podman.sock).
//
// With none of these, the system socket is named, marked Default.
package dockerhost

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Endpoint is the chosen engine address and why it was chosen.
type Endpoint struct {
	// Host is a DOCKER_HOST-style address: "unix:///path", "tcp://h:p", ...
	Host string
	// Why says where Host came from, for doctor and logs.
	Why string
	// Default is set when nothing named an engine and no known socket
	// exists: then a missing engine is no fault, only no Docker.
	Default bool
}

// SystemSocket is the engine's socket on Linux and of Docker Desktop's
// optional symlink on macOS.
const SystemSocket = "/var/run/docker.sock"

// Env is what Resolve looks at; FromOS fills it from the process.
type Env struct {
	// Flag is --docker-host, or the config file's docker_host.
	Flag string
	// Getenv reads DOCKER_HOST, DOCKER_CONTEXT, DOCKER_CONFIG and
	// XDG_RUNTIME_DIR.
	Getenv func(string) string
	// Home is the user's home directory; "" skips what lives there.
	Home string
	// IsSocket reports whether path is a unix socket.
	IsSocket func(path string) bool
}

// FromOS is the environment of this process, with flag as --docker-host.
func FromOS(flag string) Env {
	home, _ := os.UserHomeDir()
	return Env{Flag: flag, Getenv: os.Getenv, Home: home, IsSocket: isSocket}
}

func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Type() == fs.ModeSocket
}

// maxMeta bounds a context's meta.json, a few hundred bytes.
const maxMeta = 64 << 10

// Resolve chooses the endpoint. It never fails: what it could not read
// (a broken context) is said in Why, and the next source is tried.
func Resolve(e Env) Endpoint {
	if e.Getenv == nil {
		e.Getenv = func(string) string { return "" }
	}
	if e.IsSocket == nil {
		e.IsSocket = isSocket
	}
	if h := strings.TrimSpace(e.Flag); h != "" {
		return Endpoint{Host: normalize(h), Why: "--docker-host (or docker_host in the config file)"}
	}
	if h := strings.TrimSpace(e.Getenv("DOCKER_HOST")); h != "" {
		return Endpoint{Host: normalize(h), Why: "DOCKER_HOST"}
	}
	var skipped string
	name, host, err := currentContext(e)
	switch {
	case err != nil:
		skipped = fmt.Sprintf(" (docker context %q skipped: %v)", name, err)
	case host != "":
		return Endpoint{Host: host, Why: fmt.Sprintf("docker context %q", name)}
	}
	for _, s := range knownSockets(e) {
		if e.IsSocket(s.path) {
			return Endpoint{Host: "unix://" + s.path, Why: s.what + " socket" + skipped}
		}
	}
	return Endpoint{Host: "unix://" + SystemSocket, Why: "default: no Docker socket found" + skipped, Default: true}
}

// normalize makes a bare socket path a unix:// address.
func normalize(h string) string {
	if strings.HasPrefix(h, "/") {
		return "unix://" + h
	}
	return h
}

// configDir is $DOCKER_CONFIG, else ~/.docker.
func configDir(e Env) string {
	if d := e.Getenv("DOCKER_CONFIG"); d != "" {
		return d
	}
	if e.Home == "" {
		return ""
	}
	return filepath.Join(e.Home, ".docker")
}

// currentContext returns the current context's name and docker endpoint;
// "" for the default context, which means DOCKER_HOST or the platform
// socket.
func currentContext(e Env) (name, host string, err error) {
	dir := configDir(e)
	name = e.Getenv("DOCKER_CONTEXT")
	if name == "" && dir != "" {
		var cfg struct {
			CurrentContext string `json:"currentContext"`
		}
		data, rerr := readBounded(filepath.Join(dir, "config.json"))
		if rerr == nil {
			// A config.json docker itself cannot read is not ours to
			// fix; it only names no context.
			_ = json.Unmarshal(data, &cfg)
		}
		name = cfg.CurrentContext
	}
	if name == "" || name == "default" || dir == "" {
		return name, "", nil
	}
	sum := sha256.Sum256([]byte(name))
	path := filepath.Join(dir, "contexts", "meta", hex.EncodeToString(sum[:]), "meta.json")
	data, err := readBounded(path)
	if err != nil {
		return name, "", fmt.Errorf("read its meta.json: %w", err)
	}
	var meta struct {
		Endpoints map[string]struct {
			Host string `json:"Host"`
		} `json:"Endpoints"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return name, "", fmt.Errorf("parse its meta.json: %w", err)
	}
	host = strings.TrimSpace(meta.Endpoints["docker"].Host)
	if host == "" {
		return name, "", fmt.Errorf("no docker endpoint in its meta.json")
	}
	return name, host, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxMeta+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxMeta {
		return nil, fmt.Errorf("%s: over %d bytes", path, maxMeta)
	}
	return data, nil
}

type socket struct{ what, path string }

// knownSockets are where engines listen by default, in the order tried.
func knownSockets(e Env) []socket {
	var out []socket
	if e.Home != "" {
		out = append(out,
			socket{"Docker Desktop", filepath.Join(e.Home, ".docker", "run", "docker.sock")},
			socket{"Colima (default profile)", filepath.Join(e.Home, ".colima", "default", "docker.sock")},
		)
	}
	xdg := e.Getenv("XDG_RUNTIME_DIR")
	if xdg != "" {
		out = append(out, socket{"rootless Docker", filepath.Join(xdg, "docker.sock")})
	}
	out = append(out, socket{"system Docker", SystemSocket})
	if xdg != "" {
		out = append(out, socket{"rootless Podman", filepath.Join(xdg, "podman", "podman.sock")})
	}
	return append(out, socket{"Podman", "/run/podman/podman.sock"})
}
