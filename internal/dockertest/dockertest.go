// Package dockertest gives tests a real Docker Engine and the images they
// run: the docker driver's static test program
// (drivers/docker/testdata/testprog) in images FROM scratch, built on the
// engine itself, so no registry is needed. Without an engine a test skips,
// or fails when EINSORA_REQUIRE_DOCKER=1 (as in CI).
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"
)

// Testprog is the import path of the program every test image runs; its
// first argument picks what it does (serve, exit N, oom, …).
const Testprog = "einsora.dev/edge/drivers/docker/testdata/testprog"

var engine struct {
	once sync.Once
	cli  *client.Client
	arch string
	err  error
}

// Engine returns a client of the engine the tests run against, shared by
// the test process, and the engine's architecture. Without an engine it
// skips the test, or fails it when EINSORA_REQUIRE_DOCKER=1.
func Engine(t testing.TB) (*client.Client, string) {
	t.Helper()
	engine.once.Do(func() {
		cli, err := client.New(client.FromEnv)
		if err != nil {
			engine.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		v, err := cli.ServerVersion(ctx, client.ServerVersionOptions{})
		if err != nil {
			cli.Close()
			engine.err = err
			return
		}
		engine.cli, engine.arch = cli, v.Arch
	})
	if engine.err != nil {
		if os.Getenv("EINSORA_REQUIRE_DOCKER") == "1" {
			t.Fatalf("no Docker engine answers and EINSORA_REQUIRE_DOCKER=1: %v", engine.err)
		}
		t.Skipf("no Docker engine answers (%v); set EINSORA_REQUIRE_DOCKER=1 to fail instead", engine.err)
	}
	return engine.cli, engine.arch
}

// Build builds one image FROM scratch of the test program for each entry
// of cmds, whose value is the image's CMD (the program's arguments; none
// for an empty one), and
// returns the tags by key: prefix-RANDOM:key. The caller removes them
// (Remove).
func Build(cli *client.Client, arch, prefix string, cmds map[string][]string) (map[string]string, error) {
	dir, err := os.MkdirTemp("", "einsora-testprog-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "testprog")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, Testprog)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build testprog: %v\n%s", err, out)
	}
	prog, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"testprog": prog}
	for key, args := range cmds {
		df := "FROM scratch\nCOPY testprog /testprog\nENTRYPOINT [\"/testprog\"]\n"
		if len(args) > 0 {
			c, err := json.Marshal(args)
			if err != nil {
				return nil, err
			}
			df += "CMD " + string(c) + "\n"
		}
		files["Dockerfile."+key] = []byte(df)
	}
	context_, err := TarFiles(files)
	if err != nil {
		return nil, err
	}
	id := randHex()
	tags := make(map[string]string, len(cmds))
	for key := range cmds {
		tag := prefix + "-" + id + ":" + key
		if err := buildOne(cli, context_, "Dockerfile."+key, tag); err != nil {
			Remove(cli, tags)
			return nil, err
		}
		tags[key] = tag
	}
	return tags, nil
}

// Image builds one image of the test program whose CMD is args, removed
// when t ends.
func Image(t testing.TB, prefix string, args ...string) string {
	t.Helper()
	cli, arch := Engine(t)
	tags, err := Build(cli, arch, prefix, map[string][]string{"1": args})
	if err != nil {
		t.Fatalf("build test image: %v", err)
	}
	t.Cleanup(func() { Remove(cli, tags) })
	return tags["1"]
}

// Remove removes the images Build made.
func Remove(cli *client.Client, tags map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tag := range tags {
		_, _ = cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	}
}

func buildOne(cli *client.Client, context_ []byte, dockerfile, tag string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cli.ImageBuild(ctx, bytes.NewReader(context_), client.ImageBuildOptions{
		Tags: []string{tag}, Dockerfile: dockerfile, Remove: true, ForceRemove: true, Version: build.BuilderV1,
		// Without the cache: test packages build the same program in
		// parallel, and one's Remove (which prunes untagged parents)
		// would delete a cached layer another is building on ("unknown
		// parent image ID").
		NoCache: true,
	})
	if err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	if bytes.Contains(out, []byte(`"errorDetail"`)) {
		return fmt.Errorf("build %s: %s", tag, out)
	}
	return nil
}

// TarFiles returns a tar archive holding files, each mode 0755.
func TarFiles(files map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, b := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(b))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func randHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
