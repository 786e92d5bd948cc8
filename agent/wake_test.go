package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/docker"
	"einsora.dev/edge/drivers/sim"
	"einsora.dev/edge/internal/dockertest"
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
	return dockertest.Image(t, "einsora-agent-test", "exit", "3")
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
