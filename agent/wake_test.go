package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/docker"
	"einsora.dev/edge/drivers/sim"
	"einsora.dev/edge/protocol"
)

// The slow safety-net pass is chosen only when every driver notifies.
func TestDefaultApplyInterval(t *testing.T) {
	s, err := sim.New(t.TempDir(), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := docker.New(docker.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	for _, tt := range []struct {
		name string
		h    *drivers.Host
		want time.Duration
	}{
		{"sim", drivers.NewHost(s), DefaultApplyInterval},
		{"docker", drivers.NewHost(d), NotifiedApplyInterval},
		{"docker_and_sim", drivers.NewHost(d, s), DefaultApplyInterval},
		{"none", drivers.NewHost(), DefaultApplyInterval},
	} {
		if got := defaultApplyInterval(tt.h); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// exitImage builds an image FROM scratch of the docker driver's static
// test program that exits with code 3.
func exitImage(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		if os.Getenv("EINSORA_REQUIRE_DOCKER") == "1" {
			t.Fatalf("no Docker Engine answers and EINSORA_REQUIRE_DOCKER=1: %v: %s", err, out)
		}
		t.Skipf("no Docker Engine answers (%v); set EINSORA_REQUIRE_DOCKER=1 to fail instead", err)
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "testprog"), "../drivers/docker/testdata/testprog")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build test program: %v\n%s", err, out)
	}
	df := "FROM scratch\nCOPY testprog /testprog\nENTRYPOINT [\"/testprog\", \"exit\", \"3\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	rand.Read(b[:])
	tag := "einsora-agent-test-" + hex.EncodeToString(b[:]) + ":exit3"
	cmd := exec.Command("docker", "build", "-q", "-t", tag, dir)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", tag).Run() })
	return tag
}

// On Docker the apply loop wakes on the engine's events: a container that
// exits is reported although the periodic pass (30 s, on a fake clock that
// never moves) cannot have run. Every timer of the agent is on that clock,
// so only the engine's events can make the passes that see the start and
// the exit.
func TestDockerExitReportedBeforeThePeriodicPass(t *testing.T) {
	image := exitImage(t)
	var b [4]byte
	rand.Read(b[:])
	machine := "m-wake-" + hex.EncodeToString(b[:])
	d, err := docker.New(docker.Options{Machine: machine, StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	clk := clock.NewFake(start)
	f := newFakeHub()
	h := startAgent(t, t.TempDir(), f, func(c *Config) {
		c.Drivers, c.Clock, c.ApplyInterval = drivers.NewHost(d), clk, NotifiedApplyInterval
	})
	w := run("w-wake-"+hex.EncodeToString(b[:]), 1)
	w.Driver, w.Image = docker.NameContainer, image
	f.set(w)
	s := waitCode(t, f, w.ID, protocol.CodeExited)
	h.stop()
	if !clk.Now().Equal(start) {
		t.Fatalf("the fake clock moved: the periodic pass could have run")
	}
	if s.ExitCode == nil || *s.ExitCode != 3 {
		t.Errorf("reported %+v, want exit code 3", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Remove(ctx, w.ID); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	d.Close()
}
