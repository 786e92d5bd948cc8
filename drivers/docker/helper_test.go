package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"einsora.dev/edge/internal/dockertest"
)

// runID makes this test process's names unique, so parallel runs against
// one engine do not collide.
var runID = func() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// testPrefix begins every workload ID the tests use.
var testPrefix = "t-" + runID + "-"

// engine is the client requireEngine handed out, for sweep.
var engine *client.Client

// requireEngine returns a client for the engine the tests run against.
// Without one it skips the test, or fails it when EINSORA_REQUIRE_DOCKER=1.
func requireEngine(t testing.TB) *client.Client {
	t.Helper()
	cli, _ := dockertest.Engine(t)
	engine = cli
	return cli
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newTestDriver returns a driver over the test engine, closed when the
// test ends. An empty o.StateDir gets a fresh one.
func newTestDriver(t testing.TB, o Options) *Driver {
	t.Helper()
	requireEngine(t)
	if o.StateDir == "" {
		o.StateDir = t.TempDir()
	}
	if o.Logger == nil {
		o.Logger = newTestDriverLogger()
	}
	if o.StopGrace == 0 {
		o.StopGrace = 5 * time.Second
	}
	d, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// newTestDriverLogger discards: background pulls may log after a test
// has ended, when its testing.T must not be used.
func newTestDriverLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testImages are the images the tests run, all one static program FROM
// scratch, differing only in their command.
type testImages struct {
	serve, exit3, exit0, oom string
}

var images struct {
	once sync.Once
	imgs testImages
	err  error
	made map[string]string
}

// requireImages builds the test images once per test process; TestMain
// removes them.
func requireImages(t testing.TB) testImages {
	t.Helper()
	cli := requireEngine(t)
	_, arch := dockertest.Engine(t)
	images.once.Do(func() {
		images.made, images.err = dockertest.Build(cli, arch, "einsora-test-"+runID, map[string][]string{
			"serve": {"serve"},
			"exit3": {"exit", "3"},
			"exit0": {"exit", "0"},
			"oom":   {"oom"},
		})
		m := images.made
		images.imgs = testImages{serve: m["serve"], exit3: m["exit3"], exit0: m["exit0"], oom: m["oom"]}
	})
	if images.err != nil {
		t.Fatalf("build test images: %v", images.err)
	}
	return images.imgs
}

// sweep removes whatever this test process left on the engine: containers
// and volumes named for its workloads, and its images.
func sweep() {
	if engine == nil {
		return
	}
	cli := engine
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := NamePrefix + testPrefix
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("name", prefix)})
	if err == nil {
		for _, c := range cs.Items {
			_, _ = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		}
	}
	vs, err := cli.VolumeList(ctx, client.VolumeListOptions{})
	if err == nil {
		for _, v := range vs.Items {
			if strings.HasPrefix(v.Name, prefix) {
				_, _ = cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true})
			}
		}
	}
	dockertest.Remove(cli, images.made)
}

func TestMain(m *testing.M) {
	code := m.Run()
	sweep()
	os.Exit(code)
}

// containerID returns the ID of w's container, "" when there is none.
func containerID(t testing.TB, w string) string {
	t.Helper()
	cli := requireEngine(t)
	res, err := cli.ContainerInspect(testCtx(t), ContainerName(w), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatalf("inspect %s: %v", ContainerName(w), err)
	}
	return res.Container.ID
}

// writeData writes /data/name in w's container through the engine's
// archive API, which works on stopped containers too.
func writeData(t *testing.T, w, name, content string) {
	t.Helper()
	cli := requireEngine(t)
	b, err := dockertest.TarFiles(map[string][]byte{name: []byte(content)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cli.CopyToContainer(testCtx(t), ContainerName(w), client.CopyToContainerOptions{
		DestinationPath: DataPath, Content: bytes.NewReader(b),
	})
	if err != nil {
		t.Fatalf("write %s/%s in %s: %v", DataPath, name, w, err)
	}
}

// readData reads /data/name from w's container; ok is false when either
// is missing.
func readData(t *testing.T, w, name string) (string, bool) {
	t.Helper()
	cli := requireEngine(t)
	res, err := cli.CopyFromContainer(testCtx(t), ContainerName(w), client.CopyFromContainerOptions{
		SourcePath: DataPath + "/" + name,
	})
	if cerrdefs.IsNotFound(err) {
		return "", false
	}
	if err != nil {
		t.Fatalf("read %s/%s in %s: %v", DataPath, name, w, err)
	}
	defer res.Content.Close()
	tr := tar.NewReader(res.Content)
	if _, err := tr.Next(); err != nil {
		t.Fatalf("read %s/%s in %s: %v", DataPath, name, w, err)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		t.Fatalf("read %s/%s in %s: %v", DataPath, name, w, err)
	}
	return string(b), true
}

// makeForeign creates a container named as Einsora would name w's, with
// labels given (none: unlabelled), and returns its ID.
func makeForeign(t *testing.T, w, image string, labels map[string]string, start bool) string {
	t.Helper()
	cli := requireEngine(t)
	ctx := testCtx(t)
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:  ContainerName(w),
		Image: image,
		Config: &container.Config{
			Labels: labels,
		},
	})
	if err != nil {
		t.Fatalf("create foreign container: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := cli.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup: remove foreign container: %v", err)
		}
	})
	if start {
		if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatalf("start foreign container: %v", err)
		}
	}
	return res.ID
}

// foreignState is the engine's state of a container, "" when it is gone.
func foreignState(t *testing.T, id string) string {
	t.Helper()
	cli := requireEngine(t)
	res, err := cli.ContainerInspect(testCtx(t), id, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatalf("inspect foreign container: %v", err)
	}
	return string(res.Container.State.Status)
}
