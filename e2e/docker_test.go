package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"einsora.dev/edge/internal/dockertest"
)

// requireDocker skips without an engine, or fails when
// EINSORA_REQUIRE_DOCKER=1 (CI), so these tests never silently vanish.
func requireDocker(t *testing.T) {
	t.Helper()
	dockertest.Engine(t)
}

// scratchImage builds an image FROM scratch holding the docker driver's
// static test program, which serves until stopped.
func scratchImage(t *testing.T) string {
	t.Helper()
	return dockertest.Image(t, "einsora-e2e", "serve")
}

func containerState(t *testing.T, name string) string {
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Status}}", name).Output()
	if err != nil {
		return "absent"
	}
	return strings.TrimSpace(string(out))
}

func TestSoloRunsRealContainers(t *testing.T) {
	requireDocker(t)
	image := scratchImage(t)
	s := startSoloWith(t, t.TempDir(), "docker")
	id := s.must("workload", "create", "--tenant", "local", "--name", "web", "--kind", "container", "--class", "cpu-1", "--region", "local", "--image", image)
	t.Cleanup(func() {
		exec.Command("docker", "rm", "-f", "einsora-"+id).Run()
		exec.Command("docker", "volume", "rm", "-f", "einsora-"+id).Run()
	})
	s.wait(id, "running")
	if w := s.show(id); w.Driver != "docker" {
		t.Fatalf("placed on driver %q, want docker", w.Driver)
	}
	if got := containerState(t, "einsora-"+id); got != "running" {
		t.Fatalf("container is %s, want running", got)
	}
	s.must("workload", "park", id)
	s.wait(id, "stopped")
	if got := containerState(t, "einsora-"+id); got != "exited" {
		t.Errorf("parked container is %s, want exited (kept)", got)
	}
	s.must("workload", "run", id)
	s.wait(id, "running")
	s.must("workload", "rm", id)
	s.wait(id, "gone")
	if got := containerState(t, "einsora-"+id); got != "absent" {
		t.Errorf("removed container is %s, want absent", got)
	}
	if err := exec.Command("docker", "volume", "inspect", "einsora-"+id).Run(); err == nil {
		t.Error("volume still there after rm")
	}
}
