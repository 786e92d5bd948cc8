package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"

	"einsora.dev/edge/protocol"
)

// dockerEndpoint is where the Docker Engine API listens.
type dockerEndpoint struct {
	network, address string
	// explicit is set when Options named the host: then a missing socket
	// is worth a note, where by default it only means there is no Docker.
	explicit bool
	err      error
}

// parseDockerHost reads Options.DockerHost, in the forms DOCKER_HOST takes
// that speak plain HTTP.
func parseDockerHost(host, root string) dockerEndpoint {
	switch {
	case host == "":
		return dockerEndpoint{network: "unix", address: joinRoot(root, "/var/run/docker.sock")}
	case strings.HasPrefix(host, "unix://"):
		return dockerEndpoint{network: "unix", address: strings.TrimPrefix(host, "unix://"), explicit: true}
	case strings.HasPrefix(host, "tcp://"):
		return dockerEndpoint{network: "tcp", address: strings.TrimPrefix(host, "tcp://"), explicit: true}
	case strings.HasPrefix(host, "/"):
		return dockerEndpoint{network: "unix", address: host, explicit: true}
	}
	return dockerEndpoint{err: fmt.Errorf("docker host %q: unsupported scheme", truncate(host, 64))}
}

func joinRoot(root, path string) string {
	if root == "/" {
		return path
	}
	return root + path
}

// maxDockerBody bounds an answer from the engine; /info is a few KiB.
const maxDockerBody = 1 << 20

// probeDocker asks the engine for its version and runtimes (nvidia, runsc,
// ...) over its API, with net/http rather than a Docker client: two GETs do
// not warrant the dependency.
func probeDocker(ctx context.Context, p *Prober) (func(*protocol.Inventory), error) {
	ep := p.docker
	if ep.err != nil {
		return nil, ep.err
	}
	if ep.network == "unix" && !ep.explicit {
		if _, err := os.Stat(ep.address); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, ep.network, ep.address)
		},
		// A probe every few minutes gains nothing from an idle connection
		// held open to the engine.
		DisableKeepAlives: true,
	}}

	// The two calls go out together: on a busy engine each takes tens of
	// milliseconds, most of a probe's time.
	var version engineVersion
	var info struct {
		Runtimes map[string]json.RawMessage
	}
	var infoErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		infoErr = dockerGet(ctx, p, client, "/info", &info)
	}()
	versionErr := dockerGet(ctx, p, client, "/version", &version)
	<-done
	if versionErr != nil {
		return nil, versionErr
	}
	d := version.docker()
	if d.Version == "" {
		return nil, errors.New("docker /version: no version")
	}
	for name := range info.Runtimes {
		d.Runtimes = append(d.Runtimes, name)
	}
	return func(inv *protocol.Inventory) { inv.Docker = d }, infoErr
}

func dockerGet(ctx context.Context, p *Prober, client *http.Client, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	// The host part is ignored: the transport dials the endpoint.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker"+path, nil)
	if err != nil {
		return fmt.Errorf("docker %s: %w", path, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("docker %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("docker %s: %s", path, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDockerBody+1))
	if err == nil && len(body) > maxDockerBody {
		err = fmt.Errorf("over %d bytes", maxDockerBody)
	}
	if p.rec != nil {
		p.rec.record("docker"+path, body, err)
	}
	if err != nil {
		return fmt.Errorf("docker %s: read: %w", path, err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("docker %s: decode: %w", path, err)
	}
	return nil
}

// engineVersion is the part of GET /version that tells engines apart.
type engineVersion struct {
	Version  string
	Platform struct{ Name string }
	// Components are e.g. "Engine", "containerd" (Docker) or "Podman
	// Engine", "Conmon" (Podman).
	Components []struct{ Name, Version string }
}

// docker tells which engine answered: Podman names a "Podman Engine"
// component; Docker Desktop names itself in Platform.Name; anything else
// speaking the API is taken for Docker. The version is kept as reported
// ("master" from a development build): it is never read as a number.
func (v engineVersion) docker() *protocol.Docker {
	d := &protocol.Docker{
		Version:  strings.TrimSpace(v.Version),
		Kind:     protocol.EngineDocker,
		Platform: strings.TrimSpace(v.Platform.Name),
	}
	engine := ""
	for _, c := range v.Components {
		switch {
		case strings.Contains(strings.ToLower(c.Name), "podman"):
			d.Kind, engine = protocol.EnginePodman, c.Version
		case c.Name == "Engine" && engine == "":
			engine = c.Version
		}
	}
	if d.Kind != protocol.EnginePodman && strings.HasPrefix(d.Platform, "Docker Desktop") {
		d.Kind = protocol.EngineDockerDesktop
	}
	if d.Version == "" {
		d.Version = strings.TrimSpace(engine)
	}
	d.Version = truncate(d.Version, 64)
	d.Platform = truncate(d.Platform, 128)
	return d
}
