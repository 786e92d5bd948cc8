package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/docker"
	"einsora.dev/edge/internal/dockertest"
	"einsora.dev/edge/internal/syncbuf"
	"einsora.dev/edge/internal/testnet"
	"einsora.dev/edge/protocol"
)

// dockerTestprog builds the docker driver's test program into an image
// FROM scratch, removed when the test ends. Without an engine it skips,
// or fails when EINSORA_REQUIRE_DOCKER=1.
func dockerTestprog(t *testing.T) (*client.Client, string) {
	t.Helper()
	cli, _ := dockertest.Engine(t)
	return cli, dockertest.Image(t, "einsora-test-agent")
}

func randHex() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// TestRestartOnFailureDocker: a container exiting non-zero under
// on-failure:2 is started by the agent three times in all on the real
// engine, then reported exited with its code and two restarts.
func TestRestartOnFailureDocker(t *testing.T) {
	cli, image := dockerTestprog(t)
	dir := t.TempDir()
	d, err := docker.New(docker.Options{Machine: "m-restart-" + randHex(), StateDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	id := "t-" + randHex() + "-restart"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.Remove(ctx, id); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	f := newFakeHub()
	startAgent(t, dir, f, func(c *Config) {
		c.Drivers = drivers.NewHost(d)
		c.RestartBackoff = 20 * time.Millisecond
	})
	f.set(protocol.DesiredWorkload{ID: id, Attempt: 1, Mode: protocol.ModeRun, Kind: protocol.KindContainer,
		Driver: docker.NameContainer, Isolation: protocol.IsolationContainer, Image: image,
		Resources: protocol.Resources{CPUs: 1, MemoryMB: 64},
		WorkloadSpec: protocol.WorkloadSpec{
			Command: []string{"exit", "3"},
			Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, Max: 2},
		}})
	var s protocol.Status
	deadline := time.Now().Add(60 * time.Second)
	for {
		var ok bool
		s, ok = f.status(id)
		if ok && s.Code == protocol.CodeExited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out; last status %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s.Restarts != 2 || s.ExitCode == nil || *s.ExitCode != 3 {
		t.Errorf("final status: restarts %d, exit code %v; want 2 and 3", s.Restarts, s.ExitCode)
	}
	ir, err := cli.ContainerInspect(context.Background(), docker.ContainerName(id), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ir.Container.Config.Cmd); got != "[exit 3]" {
		t.Errorf("container command %s, want [exit 3]", got)
	}
}

// TestDockerWorkloadEndToEnd: through the agent and the real engine, a
// tiny HTTP server with a command, env, a secret, a published port and a
// named volume serves its env over the port, its output reaches the
// agent's log store, park closes the port, a new attempt serves again, and
// removal deletes the volume and the output. The secret appears in no log
// line of the agent.
func TestDockerWorkloadEndToEnd(t *testing.T) {
	cli, image := dockerTestprog(t)
	dir := t.TempDir()
	var agentLog syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&agentLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	machine := "m-e2e-" + randHex()
	d, err := docker.New(docker.Options{Machine: machine, StateDir: dir, Logger: logger, StopGrace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	id := "t-" + randHex() + "-e2e"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d.Remove(ctx, id)
	})
	f := newFakeHub()
	h := startAgent(t, dir, f, func(c *Config) {
		c.Drivers = drivers.NewHost(d)
		c.Logger = logger
	})
	port := testnet.FreePort(t)
	const secret = "e2e-secret-" + "never-logged"
	w := protocol.DesiredWorkload{ID: id, Attempt: 1, Mode: protocol.ModeRun, Kind: protocol.KindContainer,
		Driver: docker.NameContainer, Isolation: protocol.IsolationContainer, Image: image,
		Resources: protocol.Resources{CPUs: 1, MemoryMB: 64},
		WorkloadSpec: protocol.WorkloadSpec{
			Command:   []string{"http"},
			Env:       map[string]string{"GREETING": "hello over the port"},
			SecretEnv: map[string]string{"TOKEN": secret},
			Ports:     []protocol.Port{{Host: port, Container: 8080}},
			Volumes:   []protocol.Volume{{Name: "cache", Path: "/cache"}},
		}}
	f.set(w)
	waitCodeWithin(t, f, id, protocol.CodeRunning, time.Minute)
	if got := httpGet(t, port, "/env/GREETING"); got != "hello over the port" {
		t.Errorf("GREETING over the port: %q", got)
	}
	waitFor(t, "the request's log line in the agent's store", func() bool {
		es, _ := h.agent.Logs().Read(id, 0, time.Time{})
		for _, e := range es {
			if e.Stream == "stdout" && e.Line == "get env GREETING" {
				return true
			}
		}
		return false
	})

	f.set(withMode(w, protocol.ModePark))
	waitCodeWithin(t, f, id, protocol.CodeStopped, time.Minute)
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
		c.Close()
		t.Error("the port is open while parked")
	}

	w.Attempt = 2
	f.set(w)
	waitCodeWithin(t, f, id, protocol.CodeRunning, time.Minute)
	if got := httpGet(t, port, "/env/GREETING"); got != "hello over the port" {
		t.Errorf("after a new attempt: %q", got)
	}

	vol := d.NamedVolume(id, "cache")
	f.set(withMode(w, protocol.ModeRemove))
	waitCodeWithin(t, f, id, protocol.CodeRemoved, time.Minute)
	if _, err := cli.VolumeInspect(context.Background(), vol, client.VolumeInspectOptions{}); err == nil {
		t.Errorf("volume %s is still there after removal", vol)
	}
	waitFor(t, "the output deleted", func() bool {
		es, _ := h.agent.Logs().Read(id, 0, time.Time{})
		return len(es) == 0
	})
	if strings.Contains(agentLog.String(), secret) {
		t.Errorf("the agent logged the secret")
	}
	if !strings.Contains(agentLog.String(), id) {
		t.Error("the agent logged nothing of the workload: the secret check proves nothing")
	}
}

func waitCodeWithin(t *testing.T, f *fakeHub, id string, code protocol.Code, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if s, ok := f.status(id); ok && s.Code == code {
			return
		}
		if time.Now().After(deadline) {
			s, _ := f.status(id)
			t.Fatalf("timed out waiting for %s; last %+v", code, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// httpGet fetches path on the host port, retrying while it is not served.
func httpGet(t *testing.T, port int, path string) string {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err == nil {
			b, rerr := io.ReadAll(res.Body)
			res.Body.Close()
			if rerr == nil && res.StatusCode == http.StatusOK {
				return string(b)
			}
			err = fmt.Errorf("%s %v", res.Status, rerr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
