package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/internal/syncbuf"
	"einsora.dev/edge/internal/testnet"
	"einsora.dev/edge/protocol"
)

// freePort returns a TCP port to publish on.
func freePort(t *testing.T) int { return testnet.FreePort(t) }

// fetch GETs path on the host port, retrying until the deadline while the
// port is not yet served.
func fetch(t *testing.T, port int, path string) string {
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
			err = fmt.Errorf("status %s: %s %v", res.Status, b, rerr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s on port %d: %v", path, port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// closed reports whether nothing answers HTTP on the host port.
func closed(port int) bool {
	hc := &http.Client{Timeout: time.Second}
	res, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/cwd", port))
	if err != nil {
		return true
	}
	res.Body.Close()
	return false
}

// TestSpecHonoured runs a tiny HTTP server with a command, environment, a
// secret, a published port, a working directory and a named volume, and
// checks each from outside: over the port, through the engine, and in the
// driver's own logs.
func TestSpecHonoured(t *testing.T) {
	imgs := requireImages(t)
	cli := requireEngine(t)
	var logs syncbuf.Buffer
	d := newTestDriver(t, Options{Machine: "m-spec-" + runID, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx := testCtx(t)
	w := testPrefix + "spec"
	removeAtEnd(t, d, w)
	port := freePort(t)
	const secret = "s3cret-" + "value-never-logged"
	spec := drivers.Spec{
		Workload: w, Attempt: 1, Kind: protocol.KindContainer, Image: imgs.serve,
		Resources: protocol.Resources{CPUs: 1, MemoryMB: 64},
		WorkloadSpec: protocol.WorkloadSpec{
			Command:   []string{"http"},
			Env:       map[string]string{"GREETING": "hello from env"},
			SecretEnv: map[string]string{"TOKEN": secret},
			Ports:     []protocol.Port{{Host: port, Container: 8080, Proto: "tcp"}},
			Workdir:   "/srv/app",
			Volumes:   []protocol.Volume{{Name: "cache", Path: "/cache"}},
		},
	}
	mustStart(t, d, spec)
	waitState(t, d, w, drivers.StateRunning)

	if got := fetch(t, port, "/env/GREETING"); got != "hello from env" {
		t.Errorf("GREETING over the port: got %q", got)
	}
	if got := fetch(t, port, "/env/TOKEN"); got != secret {
		t.Errorf("TOKEN over the port: got %q", got)
	}
	if got := fetch(t, port, "/cwd"); got != "/srv/app" {
		t.Errorf("working directory: got %q", got)
	}
	fetch(t, port, "/write?path=/cache/kept")

	ir, err := cli.ContainerInspect(ctx, ContainerName(w), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := ir.Container.HostConfig
	if hc.NanoCPUs != 1e9 || hc.Memory != 64<<20 || hc.PidsLimit == nil || *hc.PidsLimit != PidsLimit {
		t.Errorf("limits: NanoCPUs %d, Memory %d, PidsLimit %v", hc.NanoCPUs, hc.Memory, hc.PidsLimit)
	}
	if lc := hc.LogConfig; lc.Type != LogDriver || lc.Config["max-size"] != LogMaxSize || lc.Config["max-file"] != LogMaxFiles {
		t.Errorf("log config %+v: the engine's copy is unbounded", lc)
	}
	for k, v := range ir.Container.Config.Labels {
		if strings.Contains(k+v, secret) {
			t.Errorf("label %s=%s holds the secret", k, v)
		}
	}
	vol := d.NamedVolume(w, "cache")
	if !strings.Contains(vol, ".m") {
		t.Errorf("named volume %s does not name the machine", vol)
	}
	mounted := false
	for _, m := range ir.Container.Mounts {
		mounted = mounted || (m.Name == vol && m.Destination == "/cache")
	}
	if !mounted {
		t.Errorf("volume %s not mounted at /cache: %+v", vol, ir.Container.Mounts)
	}

	// Parked: the port closes and the volume stays.
	if err := d.Stop(ctx, w); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, w, drivers.StateStopped)
	if !closed(port) {
		t.Errorf("port %d still answers after Stop", port)
	}
	if _, err := cli.VolumeInspect(ctx, vol, client.VolumeInspectOptions{}); err != nil {
		t.Errorf("volume after Stop: %v", err)
	}

	// Run again: it serves again, with the volume's file.
	spec.Attempt = 2
	mustStart(t, d, spec)
	waitState(t, d, w, drivers.StateRunning)
	if got := fetch(t, port, "/env/GREETING"); got != "hello from env" {
		t.Errorf("after restart: got %q", got)
	}

	// Removed: the named volume goes with it.
	if err := d.Remove(ctx, w); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.VolumeInspect(ctx, vol, client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("volume %s after Remove: got %v, want not found", vol, err)
	}
	if !closed(port) {
		t.Errorf("port %d still answers after Remove", port)
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the driver logged the secret:\n%s", logs.String())
	}
	if logs.String() == "" {
		t.Error("the driver logged nothing: the secret check proves nothing")
	}
}

// TestNamedVolumesKeepApart: two machines' volumes of one workload and
// name are two volumes, and removing one leaves the other.
func TestNamedVolumesKeepApart(t *testing.T) {
	a := newTestDriver(t, Options{Machine: "m-a"})
	b := newTestDriver(t, Options{Machine: "m-b"})
	w := testPrefix + "vols"
	if a.NamedVolume(w, "x") == b.NamedVolume(w, "x") {
		t.Fatalf("machines share volume name %s", a.NamedVolume(w, "x"))
	}
	ctx := testCtx(t)
	cli := requireEngine(t)
	for _, d := range []*Driver{a, b} {
		if err := d.ensureVolume(ctx, w, d.NamedVolume(w, "x"), "x"); err != nil {
			t.Fatal(err)
		}
	}
	removeAtEnd(t, b, w)
	if err := a.Remove(ctx, w); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.VolumeInspect(ctx, a.NamedVolume(w, "x"), client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("a's volume after a's Remove: %v", err)
	}
	if _, err := cli.VolumeInspect(ctx, b.NamedVolume(w, "x"), client.VolumeInspectOptions{}); err != nil {
		t.Errorf("b's volume after a's Remove: %v", err)
	}
}

// TestBadSpecRefused: Start refuses a spec that fails Validate, before it
// makes anything.
func TestBadSpecRefused(t *testing.T) {
	imgs := requireImages(t)
	d := newTestDriver(t, Options{})
	w := testPrefix + "badspec"
	removeAtEnd(t, d, w)
	err := d.Start(testCtx(t), drivers.Spec{Workload: w, Attempt: 1, Image: imgs.serve,
		WorkloadSpec: protocol.WorkloadSpec{Ports: []protocol.Port{{Host: 0, Container: 80}}}})
	if !errors.Is(err, protocol.ErrInvalidSpec) {
		t.Fatalf("got %v, want ErrInvalidSpec", err)
	}
	if id := containerID(t, w); id != "" {
		t.Errorf("a container was made for a bad spec")
	}
	err = d.Start(context.Background(), drivers.Spec{Workload: w, Attempt: 1, Image: imgs.serve,
		WorkloadSpec: protocol.WorkloadSpec{Volumes: []protocol.Volume{{Name: "d", Path: DataPath}}}})
	if err == nil {
		t.Fatal("Start accepted a volume over the data volume")
	}
}

// TestSpecChangeRecreates: a workload started again with another spec
// gets a new container with it, keeping its data; with the same spec it
// keeps its container.
func TestSpecChangeRecreates(t *testing.T) {
	imgs := requireImages(t)
	d := newTestDriver(t, Options{})
	ctx := testCtx(t)
	w := testPrefix + "respec"
	removeAtEnd(t, d, w)
	port := freePort(t)
	spec := func(attempt int64, greeting string) drivers.Spec {
		return drivers.Spec{Workload: w, Attempt: attempt, Image: imgs.serve, WorkloadSpec: protocol.WorkloadSpec{
			Command: []string{"http"}, Env: map[string]string{"GREETING": greeting},
			Ports: []protocol.Port{{Host: port, Container: 8080}}}}
	}
	mustStart(t, d, spec(1, "one"))
	waitState(t, d, w, drivers.StateRunning)
	if got := fetch(t, port, "/env/GREETING"); got != "one" {
		t.Fatalf("got %q", got)
	}
	writeData(t, w, "kept", "yes")
	first := containerID(t, w)

	if err := d.Stop(ctx, w); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, w, drivers.StateStopped)
	mustStart(t, d, spec(2, "two"))
	if inst := waitState(t, d, w, drivers.StateRunning); inst.Attempt != 2 {
		t.Errorf("attempt %d, want 2", inst.Attempt)
	}
	if got := fetch(t, port, "/env/GREETING"); got != "two" {
		t.Errorf("after a changed spec: got %q, want two", got)
	}
	second := containerID(t, w)
	if second == first {
		t.Error("the container was not made anew")
	}
	if got, ok := readData(t, w, "kept"); !ok || got != "yes" {
		t.Errorf("data after recreation: %q, %v", got, ok)
	}

	if err := d.Stop(ctx, w); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, w, drivers.StateStopped)
	mustStart(t, d, spec(3, "two"))
	waitState(t, d, w, drivers.StateRunning)
	if containerID(t, w) != second {
		t.Error("the same spec made a new container")
	}
}
