package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/driverstest"
	"einsora.dev/edge/protocol"
)

// waitInstance polls d.List until ok holds for w's instance or the
// deadline passes.
func waitInstance(t *testing.T, d *Driver, w, what string, ok func(inst drivers.Instance, found bool) bool) drivers.Instance {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		inst, found := listed(t, d, w)
		if ok(inst, found) {
			return inst
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out waiting for %s; last: found %v, %+v", w, what, found, inst)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitState(t *testing.T, d *Driver, w string, s drivers.State) drivers.Instance {
	t.Helper()
	return waitInstance(t, d, w, string(s), func(inst drivers.Instance, found bool) bool {
		return found && inst.State == s
	})
}

// listed returns w's instance from d.List, failing if it appears twice.
func listed(t *testing.T, d *Driver, w string) (drivers.Instance, bool) {
	t.Helper()
	list, err := d.List(testCtx(t))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var got []drivers.Instance
	for _, inst := range list {
		if inst.Workload == w {
			got = append(got, inst)
		}
	}
	switch len(got) {
	case 0:
		return drivers.Instance{}, false
	case 1:
		return got[0], true
	}
	t.Fatalf("List: got %d instances of %s, want 1: %+v", len(got), w, got)
	return drivers.Instance{}, false
}

func mustStart(t *testing.T, d *Driver, spec drivers.Spec) {
	t.Helper()
	if err := d.Start(testCtx(t), spec); err != nil {
		t.Fatalf("Start(%s, attempt %d): %v", spec.Workload, spec.Attempt, err)
	}
}

// removeAtEnd removes w through d when the test ends.
func removeAtEnd(t *testing.T, d *Driver, w string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.Remove(ctx, w); err != nil {
			t.Errorf("cleanup: Remove(%s): %v", w, err)
		}
	})
}

func TestLifecycle(t *testing.T) {
	imgs := requireImages(t)
	cli := requireEngine(t)
	stateDir := t.TempDir()
	d := newTestDriver(t, Options{StateDir: stateDir})
	ctx := testCtx(t)
	w := testPrefix + "life"
	removeAtEnd(t, d, w)
	spec := drivers.Spec{
		Workload: w, Attempt: 1, Kind: protocol.KindContainer, Image: imgs.serve,
		Resources: protocol.Resources{CPUs: 1, MemoryMB: 64},
	}

	mustStart(t, d, spec)
	inst := waitState(t, d, w, drivers.StateRunning)
	if inst.Attempt != 1 {
		t.Errorf("got attempt %d, want 1", inst.Attempt)
	}

	// What the engine was asked for.
	ir, err := cli.ContainerInspect(ctx, ContainerName(w), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	c := ir.Container
	id := c.ID
	wantLabels := map[string]string{LabelWorkload: w, LabelAttempt: "1", LabelDriver: NameContainer}
	for k, v := range wantLabels {
		if got := c.Config.Labels[k]; got != v {
			t.Errorf("label %s: got %q, want %q", k, got, v)
		}
	}
	if got, want := c.HostConfig.NanoCPUs, int64(1e9); got != want {
		t.Errorf("NanoCPUs: got %d, want %d", got, want)
	}
	if got, want := c.HostConfig.Memory, int64(64<<20); got != want {
		t.Errorf("Memory: got %d, want %d", got, want)
	}
	if !c.HostConfig.RestartPolicy.IsNone() {
		t.Errorf("restart policy: got %q, want none", c.HostConfig.RestartPolicy.Name)
	}
	if len(c.Mounts) != 1 || c.Mounts[0].Type != mount.TypeVolume || c.Mounts[0].Name != VolumeName(w) || c.Mounts[0].Destination != DataPath {
		t.Errorf("mounts: got %+v, want volume %s at %s", c.Mounts, VolumeName(w), DataPath)
	}

	writeData(t, w, "note", "hello")
	if got, _ := readData(t, w, "boots"); strings.Count(got, "\n") != 1 {
		t.Errorf("boots after first start: got %q, want 1 line", got)
	}

	if err := d.Stop(ctx, w); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	inst, _ = listed(t, d, w)
	if inst.State != drivers.StateStopped || inst.Attempt != 1 {
		t.Errorf("after Stop: got %s attempt %d, want stopped attempt 1", inst.State, inst.Attempt)
	}
	if got, ok := readData(t, w, "note"); !ok || got != "hello" {
		t.Errorf("note while stopped: got %q (present %v), want %q", got, ok, "hello")
	}

	spec.Attempt = 2
	mustStart(t, d, spec)
	inst = waitState(t, d, w, drivers.StateRunning)
	if inst.Attempt != 2 {
		t.Errorf("after restart: got attempt %d, want 2", inst.Attempt)
	}
	if got := containerID(t, w); got != id {
		t.Errorf("after restart: got container %s, want the same %s", got, id)
	}
	if got, ok := readData(t, w, "note"); !ok || got != "hello" {
		t.Errorf("note after restart: got %q (present %v), want %q", got, ok, "hello")
	}
	// The program appends a line at each boot, in the volume.
	waitFor(t, "second boot line", func() bool {
		got, _ := readData(t, w, "boots")
		return strings.Count(got, "\n") == 2
	})

	// Agent restart: a new driver over the same engine and state.
	d2 := newTestDriver(t, Options{StateDir: stateDir})
	inst, found := listed(t, d2, w)
	if !found || inst.State != drivers.StateRunning || inst.Attempt != 2 {
		t.Errorf("after agent restart: got %+v (found %v), want running attempt 2", inst, found)
	}
	mustStart(t, d2, spec)
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", LabelWorkload+"="+w)})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	if len(cs.Items) != 1 || cs.Items[0].ID != id {
		t.Errorf("after agent restart and Start: got %d containers, want only %s", len(cs.Items), shortID(id))
	}

	if err := d2.Stop(ctx, w); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	d3 := newTestDriver(t, Options{StateDir: stateDir})
	inst, _ = listed(t, d3, w)
	if inst.State != drivers.StateStopped || inst.Attempt != 2 {
		t.Errorf("stopped, after agent restart: got %s attempt %d, want stopped attempt 2", inst.State, inst.Attempt)
	}

	if err := d3.Remove(ctx, w); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, found := listed(t, d3, w); found {
		t.Errorf("after Remove: listed, want unlisted")
	}
	if got := containerID(t, w); got != "" {
		t.Errorf("after Remove: got container %s, want none", got)
	}
	if _, err := cli.VolumeInspect(ctx, VolumeName(w), client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("after Remove: volume inspect got %v, want not found", err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExitReported(t *testing.T) {
	imgs := requireImages(t)
	d := newTestDriver(t, Options{})
	tests := []struct {
		name     string
		image    string
		memoryMB int
		wantCode int
		wantOOM  bool
	}{
		{name: "exit_code_3", image: imgs.exit3, wantCode: 3},
		{name: "exit_code_0", image: imgs.exit0, wantCode: 0},
		// The init process reports the kill as 128+SIGKILL.
		{name: "oom_killed", image: imgs.oom, memoryMB: 16, wantCode: 137, wantOOM: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := testPrefix + "exit-" + tt.name
			removeAtEnd(t, d, w)
			mustStart(t, d, drivers.Spec{Workload: w, Attempt: 1, Image: tt.image, Resources: protocol.Resources{MemoryMB: tt.memoryMB}})
			inst := waitState(t, d, w, drivers.StateExited)
			if inst.ExitCode != tt.wantCode {
				t.Errorf("got exit code %d, want %d", inst.ExitCode, tt.wantCode)
			}
			if inst.OOMKilled != tt.wantOOM {
				t.Errorf("got OOMKilled %v, want %v", inst.OOMKilled, tt.wantOOM)
			}
		})
	}
}

func TestForeignContainersUntouched(t *testing.T) {
	imgs := requireImages(t)
	d := newTestDriver(t, Options{})
	tests := []struct {
		name   string
		labels func(w string) map[string]string
		start  bool
	}{
		{name: "unlabelled_running", start: true},
		{name: "unlabelled_created"},
		{name: "labelled_by_the_sandbox_driver", start: true, labels: func(w string) map[string]string {
			return map[string]string{LabelWorkload: w, LabelAttempt: "1", LabelDriver: NameSandbox}
		}},
		{name: "labelled_for_another_workload", start: true, labels: func(string) map[string]string {
			return map[string]string{LabelWorkload: "someone-else", LabelAttempt: "1", LabelDriver: NameContainer}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := testPrefix + "foreign-" + tt.name
			var labels map[string]string
			if tt.labels != nil {
				labels = tt.labels(w)
			}
			id := makeForeign(t, w, imgs.serve, labels, tt.start)
			before := foreignState(t, id)
			ctx := testCtx(t)
			if _, found := listed(t, d, w); found {
				t.Errorf("List: foreign container listed, want unlisted")
			}
			if err := d.Stop(ctx, w); err != nil {
				t.Errorf("Stop: got %v, want nil", err)
			}
			if err := d.Remove(ctx, w); err != nil {
				t.Errorf("Remove: got %v, want nil", err)
			}
			if err := d.Start(ctx, drivers.Spec{Workload: w, Attempt: 1, Image: imgs.serve}); err == nil {
				t.Errorf("Start over a foreign container of the same name: got nil, want an error")
			}
			if got := foreignState(t, id); got != before {
				t.Errorf("foreign container state: got %q, want %q", got, before)
			}
		})
	}
}

func TestForeignVolumeNotMounted(t *testing.T) {
	imgs := requireImages(t)
	cli := requireEngine(t)
	d := newTestDriver(t, Options{})
	ctx := testCtx(t)
	w := testPrefix + "foreign-volume"
	if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: VolumeName(w)}); err != nil {
		t.Fatalf("create volume: %v", err)
	}
	t.Cleanup(func() {
		_, _ = cli.VolumeRemove(context.Background(), VolumeName(w), client.VolumeRemoveOptions{Force: true})
	})
	if err := d.Start(ctx, drivers.Spec{Workload: w, Attempt: 1, Image: imgs.serve}); err == nil {
		t.Errorf("Start over a foreign volume: got nil, want an error")
	}
	if got := containerID(t, w); got != "" {
		removeAtEnd(t, d, w)
		t.Errorf("Start over a foreign volume: got container %s, want none", got)
	}
	if err := d.Remove(ctx, w); err != nil {
		t.Errorf("Remove: %v", err)
	}
	if _, err := cli.VolumeInspect(ctx, VolumeName(w), client.VolumeInspectOptions{}); err != nil {
		t.Errorf("foreign volume after Remove: got %v, want it kept", err)
	}
}

func TestImageUnavailable(t *testing.T) {
	requireEngine(t)
	d := newTestDriver(t, Options{})
	tests := []struct {
		name  string
		image string
	}{
		// .invalid never resolves, so this fails fast even online.
		{name: "unresolvable_registry", image: "einsora.invalid/no-such-image:latest"},
		{name: "invalid_reference", image: "Not A Reference"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := testPrefix + "noimage-" + tt.name
			removeAtEnd(t, d, w)
			t0 := time.Now()
			err := d.Start(testCtx(t), drivers.Spec{Workload: w, Attempt: 4, Image: tt.image})
			if el := time.Since(t0); el > 5*time.Second {
				t.Errorf("Start took %v, want it prompt", el)
			}
			if errors.Is(err, drivers.ErrUnavailable) {
				t.Errorf("Start: got %v, want no ErrUnavailable", err)
			}
			inst := waitState(t, d, w, drivers.StateFailed)
			if inst.Code != protocol.CodeImageUnavailable || inst.Attempt != 4 {
				t.Errorf("got code %q attempt %d, want %q attempt 4", inst.Code, inst.Attempt, protocol.CodeImageUnavailable)
			}
			if inst.Detail == "" || len(inst.Detail) > protocol.MaxDetail {
				t.Errorf("got detail of %d bytes, want 1..%d", len(inst.Detail), protocol.MaxDetail)
			}
			if err := d.Remove(testCtx(t), w); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if _, found := listed(t, d, w); found {
				t.Errorf("after Remove: listed, want unlisted")
			}
		})
	}
}

func TestUnavailableEngine(t *testing.T) {
	d, err := New(Options{Host: "unix://" + filepath.Join(t.TempDir(), "no-docker.sock"), StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	spec := drivers.Spec{Workload: "w", Attempt: 1, Image: "busybox"}
	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{name: "probe", call: d.Probe},
		{name: "list", call: func(ctx context.Context) error { _, err := d.List(ctx); return err }},
		{name: "start", call: func(ctx context.Context) error { return d.Start(ctx, spec) }},
		{name: "stop", call: func(ctx context.Context) error { return d.Stop(ctx, "w") }},
		{name: "remove", call: func(ctx context.Context) error { return d.Remove(ctx, "w") }},
		{name: "engine_info", call: func(ctx context.Context) error { _, _, err := d.EngineInfo(ctx); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			t0 := time.Now()
			err := tt.call(ctx)
			if !errors.Is(err, drivers.ErrUnavailable) {
				t.Errorf("got %v, want an error wrapping ErrUnavailable", err)
			}
			if el := time.Since(t0); el > 2*time.Second {
				t.Errorf("took %v, want under 2s", el)
			}
		})
	}
	if list, err := d.List(context.Background()); err == nil || len(list) != 0 {
		t.Errorf("List after failed Start: got %v, %v, want an error and nothing", list, err)
	}
}

func TestProbe(t *testing.T) {
	cli := requireEngine(t)
	v, err := cli.ServerVersion(testCtx(t), client.ServerVersionOptions{})
	if err != nil {
		t.Fatalf("version: %v", err)
	}
	d := newTestDriver(t, Options{})
	_, runtimes, err := d.EngineInfo(testCtx(t))
	if err != nil {
		t.Fatalf("EngineInfo: %v", err)
	}
	hasRunsc := slices.Contains(runtimes, SandboxRuntime)
	tests := []struct {
		name          string
		isolation     protocol.Isolation
		wantAvailable bool
	}{
		{name: NameContainer, isolation: protocol.IsolationContainer, wantAvailable: true},
		{name: NameSandbox, isolation: protocol.IsolationSandbox, wantAvailable: hasRunsc},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDriver(t, Options{Name: tt.name})
			if got := d.Name(); got != tt.name {
				t.Errorf("Name: got %q, want %q", got, tt.name)
			}
			if got := d.Isolation(); got != tt.isolation {
				t.Errorf("Isolation: got %v, want %v", got, tt.isolation)
			}
			err := d.Probe(testCtx(t))
			if tt.wantAvailable && err != nil {
				t.Errorf("Probe: got %v, want nil", err)
			}
			if !tt.wantAvailable && !errors.Is(err, drivers.ErrUnavailable) {
				t.Errorf("Probe: got %v, want ErrUnavailable", err)
			}
			// Negotiation brought the client down to the engine's API.
			if got := d.cli.ClientVersion(); got != v.APIVersion {
				t.Errorf("negotiated API version: got %s, want the engine's %s", got, v.APIVersion)
			}
		})
	}
}

func TestEngineInfo(t *testing.T) {
	d := newTestDriver(t, Options{})
	version, runtimes, err := d.EngineInfo(testCtx(t))
	if err != nil {
		t.Fatalf("EngineInfo: %v", err)
	}
	if version == "" {
		t.Errorf("got empty version, want one")
	}
	if !slices.Contains(runtimes, "runc") || !slices.IsSorted(runtimes) {
		t.Errorf("got runtimes %v, want a sorted list with runc", runtimes)
	}
	t.Logf("engine %s, runtimes %v", version, runtimes)
}

func TestSandboxRunsWithRunsc(t *testing.T) {
	imgs := requireImages(t)
	d := newTestDriver(t, Options{Name: NameSandbox})
	if err := d.Probe(testCtx(t)); err != nil {
		t.Skipf("sandbox driver unavailable here: %v", err)
	}
	w := testPrefix + "sandbox"
	removeAtEnd(t, d, w)
	mustStart(t, d, drivers.Spec{Workload: w, Attempt: 1, Image: imgs.serve})
	waitState(t, d, w, drivers.StateRunning)
	ir, err := requireEngine(t).ContainerInspect(testCtx(t), ContainerName(w), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if got := ir.Container.HostConfig.Runtime; got != SandboxRuntime {
		t.Errorf("runtime: got %q, want %q", got, SandboxRuntime)
	}
}

func TestDevicesNeedNvidiaRuntime(t *testing.T) {
	imgs := requireImages(t)
	d := newTestDriver(t, Options{})
	_, runtimes, err := d.EngineInfo(testCtx(t))
	if err != nil {
		t.Fatalf("EngineInfo: %v", err)
	}
	hasNvidia := slices.Contains(runtimes, NvidiaRuntime)
	tests := []struct {
		name    string
		devices []string
		skip    bool
	}{
		{name: "nvidia_without_runtime", devices: []string{"nvidia:GPU-00000000-0000-0000-0000-000000000000"}, skip: hasNvidia},
		{name: "apple_gpu", devices: []string{"apple-gpu:0"}},
		{name: "malformed", devices: []string{"gpu"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.skip {
				t.Skip("engine has the nvidia runtime")
			}
			w := testPrefix + "dev-" + tt.name
			removeAtEnd(t, d, w)
			err := d.Start(testCtx(t), drivers.Spec{Workload: w, Attempt: 1, Image: imgs.serve, Resources: protocol.Resources{Devices: tt.devices}})
			if err == nil {
				t.Errorf("Start: got nil, want an error")
			}
			inst, found := listed(t, d, w)
			if !found || inst.State != drivers.StateFailed || inst.Code != protocol.CodeFailedStart {
				t.Errorf("got %+v (found %v), want failed with %s", inst, found, protocol.CodeFailedStart)
			}
			if got := containerID(t, w); got != "" {
				t.Errorf("got container %s, want none", got)
			}
		})
	}
}

func TestWithoutStateDirAttemptFallsBackToLabel(t *testing.T) {
	imgs := requireImages(t)
	d, err := New(Options{Logger: newTestDriverLogger()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	w := testPrefix + "nostate"
	removeAtEnd(t, d, w)
	mustStart(t, d, drivers.Spec{Workload: w, Attempt: 1, Image: imgs.serve})
	mustStart(t, d, drivers.Spec{Workload: w, Attempt: 2, Image: imgs.serve})
	if inst, _ := listed(t, d, w); inst.Attempt != 2 {
		t.Errorf("same driver: got attempt %d, want 2", inst.Attempt)
	}
	d2, err := New(Options{Logger: d.log})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { d2.Close() })
	if inst, _ := listed(t, d2, w); inst.Attempt != 1 || inst.State != drivers.StateRunning {
		t.Errorf("new driver without state: got %s attempt %d, want running attempt 1 (the label's)", inst.State, inst.Attempt)
	}
}

func TestConformance(t *testing.T) {
	imgs := requireImages(t)
	stateDir := t.TempDir()
	driverstest.Run(t, func(t *testing.T) drivers.Driver {
		return newTestDriver(t, Options{StateDir: stateDir})
	}, driverstest.Options{
		Image:        imgs.serve,
		Resources:    protocol.Resources{CPUs: 1, MemoryMB: 32},
		ExitImage:    imgs.exit3,
		ExitCode:     3,
		MissingImage: "einsora.invalid/no-such-image:latest",
		WriteData:    writeData,
		ReadData:     readData,
		InstanceID:   func(t *testing.T, w string) string { return containerID(t, w) },
		Foreign: func(t *testing.T, w string) func() bool {
			id := makeForeign(t, w, imgs.serve, nil, true)
			return func() bool { return foreignState(t, id) == string(container.StateRunning) }
		},
		Prefix: testPrefix + "conf-",
	})
}

// TestStartLatencyFigures measures Start called → List reports running,
// for fresh containers and for restarts of stopped ones.
func TestStartLatencyFigures(t *testing.T) {
	if os.Getenv("EINSORA_DOCKER_FIGURES") != "1" {
		t.Skip("set EINSORA_DOCKER_FIGURES=1 to measure start latency")
	}
	imgs := requireImages(t)
	d := newTestDriver(t, Options{})
	const runs = 20
	// measure returns how long Start took to return and how long until
	// List reported the workload running.
	measure := func(w string, attempt int64) (returned, running time.Duration) {
		t0 := time.Now()
		mustStart(t, d, drivers.Spec{Workload: w, Attempt: attempt, Image: imgs.serve, Resources: protocol.Resources{CPUs: 1, MemoryMB: 64}})
		returned = time.Since(t0)
		for {
			if inst, _ := listed(t, d, w); inst.State == drivers.StateRunning {
				return returned, time.Since(t0)
			}
			if time.Since(t0) > 30*time.Second {
				t.Fatalf("%s: not running after 30s", w)
			}
		}
	}
	var figures [4][]time.Duration
	for i := range runs {
		w := fmt.Sprintf("%sfig-%d", testPrefix, i)
		removeAtEnd(t, d, w)
		ret, run := measure(w, 1)
		figures[0], figures[1] = append(figures[0], ret), append(figures[1], run)
		if err := d.Stop(testCtx(t), w); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		ret, run = measure(w, 2)
		figures[2], figures[3] = append(figures[2], ret), append(figures[3], run)
		if err := d.Remove(testCtx(t), w); err != nil {
			t.Fatalf("Remove: %v", err)
		}
	}
	names := []string{
		"new container: Start returned", "new container: Start called → List running",
		"stopped container: Start returned", "stopped container: Start called → List running",
	}
	for i, ds := range figures {
		med, p95 := percentiles(ds)
		t.Logf("%s, %d runs: median %v, p95 %v", names[i], len(ds), med.Round(time.Millisecond), p95.Round(time.Millisecond))
	}
}

// percentiles returns the median and the nearest-rank 95th percentile.
func percentiles(ds []time.Duration) (med, p95 time.Duration) {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	idx := (95*n+99)/100 - 1
	return med, s[idx]
}

func TestDeviceRequests(t *testing.T) {
	tests := []struct {
		name    string
		devices []string
		want    []container.DeviceRequest
		wantErr bool
	}{
		{name: "none"},
		{name: "two_nvidia_gpus", devices: []string{"nvidia:GPU-a", "nvidia:GPU-b"}, want: []container.DeviceRequest{{
			Driver: "nvidia", DeviceIDs: []string{"GPU-a", "GPU-b"}, Capabilities: [][]string{{"gpu"}},
		}}},
		// A MIG device goes by its MIG UUID, as the NVIDIA runtime wants.
		{name: "mig_device", devices: []string{"nvidia:MIG-6f0a3c2e-81d4-5b7a-a3e9-2c4d1f8b0e71"}, want: []container.DeviceRequest{{
			Driver: "nvidia", DeviceIDs: []string{"MIG-6f0a3c2e-81d4-5b7a-a3e9-2c4d1f8b0e71"}, Capabilities: [][]string{{"gpu"}},
		}}},
		{name: "apple_gpu", devices: []string{"apple-gpu:0"}, wantErr: true},
		{name: "no_vendor", devices: []string{"GPU-a"}, wantErr: true},
		{name: "empty_id", devices: []string{"nvidia:"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := deviceRequests(tt.devices)
			if (err != nil) != tt.wantErr {
				t.Fatalf("got error %v, want error %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i].Driver != tt.want[i].Driver || !slices.Equal(got[i].DeviceIDs, tt.want[i].DeviceIDs) ||
					len(got[i].Capabilities) != 1 || !slices.Equal(got[i].Capabilities[0], tt.want[i].Capabilities[0]) {
					t.Errorf("got %+v, want %+v", got[i], tt.want[i])
				}
			}
		})
	}
}

// engineName is the engine's rule for container and volume names.
var engineName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

func TestContainerName(t *testing.T) {
	tests := []struct {
		name     string
		workload string
		want     string
	}{
		{name: "plain_id", workload: "wl-42.a_b", want: "einsora-wl-42.a_b"},
		{name: "slash_and_space", workload: "team/a b", want: "einsora-team_a_b-"},
		{name: "leading_dash", workload: "-x", want: "einsora--x"},
		{name: "too_long", workload: strings.Repeat("x", 129), want: "einsora-" + strings.Repeat("x", 64) + "-"},
		{name: "unicode", workload: "wé", want: "einsora-w__-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ContainerName(tt.workload)
			if !strings.HasPrefix(got, tt.want) || !engineName.MatchString(got) {
				t.Errorf("got %q, want a valid name beginning %q", got, tt.want)
			}
		})
	}
	if ContainerName("a/b") == ContainerName("a_b") || ContainerName("a/b") == ContainerName("a b") {
		t.Errorf("got equal names for distinct workloads, want distinct")
	}
}

func TestPullTracker(t *testing.T) {
	msgs := []jsonstream.Message{
		{Status: "Pulling from library/x", ID: "latest"},
		{Status: "Pulling fs layer", ID: "a"},
		{Status: "Pulling fs layer", ID: "b"},
		{Status: "Already exists", ID: "c"},
		{Status: "Downloading", ID: "a", Progress: &jsonstream.Progress{Current: 1, Total: 2}},
		{Status: "Downloading", ID: "a", Progress: &jsonstream.Progress{Current: 2, Total: 2}},
		{Status: "Pull complete", ID: "a"},
		{Status: "Digest: sha256:00"},
	}
	tests := []struct {
		name string
		n    int
		want string
	}{
		{name: "header_only", n: 1, want: "pulling: 0/0 layers"},
		{name: "layers_announced", n: 3, want: "pulling: 0/2 layers"},
		{name: "one_already_there", n: 4, want: "pulling: 1/3 layers"},
		{name: "downloading", n: 6, want: "pulling: 1/3 layers"},
		{name: "one_pulled", n: 8, want: "pulling: 2/3 layers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr pullTracker
			for _, m := range msgs[:tt.n] {
				tr.add(m)
			}
			if got := tr.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		name     string
		st       container.State
		stopped  bool
		starting bool
		want     drivers.Instance
	}{
		{name: "running", st: container.State{Status: container.StateRunning}, want: drivers.Instance{State: drivers.StateRunning}},
		{name: "running_while_stop_asked", st: container.State{Status: container.StateRunning}, stopped: true, want: drivers.Instance{State: drivers.StateStopping}},
		{name: "exited_by_itself", st: container.State{Status: container.StateExited, ExitCode: 3}, want: drivers.Instance{State: drivers.StateExited, ExitCode: 3}},
		{name: "oom_killed", st: container.State{Status: container.StateExited, ExitCode: 137, OOMKilled: true}, want: drivers.Instance{State: drivers.StateExited, ExitCode: 137, OOMKilled: true}},
		{name: "stopped_on_request", st: container.State{Status: container.StateExited, ExitCode: 143}, stopped: true, want: drivers.Instance{State: drivers.StateStopped}},
		{name: "start_failed", st: container.State{Status: container.StateCreated, Error: "exec: not found"}, want: drivers.Instance{State: drivers.StateFailed, Code: protocol.CodeFailedStart, Detail: "exec: not found"}},
		{name: "created_never_started", st: container.State{Status: container.StateCreated}, want: drivers.Instance{State: drivers.StateStopped, Detail: "created, never started"}},
		{name: "being_started", st: container.State{Status: container.StateCreated}, starting: true, want: drivers.Instance{State: drivers.StateStarting}},
		{name: "removing", st: container.State{Status: container.StateRemoving}, want: drivers.Instance{State: drivers.StateStopping, Detail: "removing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got drivers.Instance
			describe(&got, &tt.st, tt.stopped, tt.starting)
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRecords(t *testing.T) {
	tests := []struct {
		name    string
		file    string // initial content; "" for none
		want    entry
		wantHas bool
	}{
		{name: "no_file"},
		{name: "damaged_file_is_ignored", file: "{not json"},
		{name: "kept_entry", file: `{"w":{"container":"c1","attempt":7,"stopped":true}}`, want: entry{Container: "c1", Attempt: 7, Stopped: true}, wantHas: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.file != "" {
				if err := os.WriteFile(filepath.Join(dir, "docker-records.json"), []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			log := newTestDriverLogger()
			r, err := loadRecords(dir, "docker", log)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			got, has := r.get("w")
			if got != tt.want || has != tt.wantHas {
				t.Errorf("got %+v (present %v), want %+v (present %v)", got, has, tt.want, tt.wantHas)
			}
			r.set("w", entry{Container: "c2", Attempt: 8})
			r2, err := loadRecords(dir, "docker", log)
			if err != nil {
				t.Fatalf("reload: %v", err)
			}
			if got, _ := r2.get("w"); got != (entry{Container: "c2", Attempt: 8}) {
				t.Errorf("after reload: got %+v, want container c2 attempt 8", got)
			}
			r2.remove("w")
			r3, _ := loadRecords(dir, "docker", log)
			if _, has := r3.get("w"); has {
				t.Errorf("after remove and reload: entry present, want absent")
			}
		})
	}
}

// Two agents on one engine, each with its own machine ID, never see or
// touch each other's containers.
func TestMachinesOnOneEngineKeepApart(t *testing.T) {
	imgs := requireImages(t)
	a := newTestDriver(t, Options{Machine: "m-a"})
	b := newTestDriver(t, Options{Machine: "m-b"})
	w := testPrefix + "machine-a"
	removeAtEnd(t, a, w)
	mustStart(t, a, drivers.Spec{Workload: w, Attempt: 1, Image: imgs.serve})
	waitState(t, a, w, drivers.StateRunning)
	list, err := b.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list {
		if in.Workload == w {
			t.Fatalf("machine b lists machine a's workload: %+v", in)
		}
	}
	// Whatever b answers, what it does not own is left alone.
	b.Stop(context.Background(), w)
	b.Remove(context.Background(), w)
	if got := waitState(t, a, w, drivers.StateRunning); got.State != drivers.StateRunning {
		t.Fatalf("machine a's workload is %s after machine b's calls", got.State)
	}
}
