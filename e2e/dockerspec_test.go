package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/internal/dockertest"
)

// httpImage builds an image FROM scratch whose entrypoint is the docker
// driver's static test program; its command (CMD, or the spec's) picks
// the mode: "http" serves GET /env/NAME on :8080.
func httpImage(t *testing.T) string {
	t.Helper()
	return dockertest.Image(t, "einsora-e2e-http", "serve")
}

func getEnv(port int, name string) (string, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/env/%s", port, name))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func volumesOf(id string) []string {
	out, _ := exec.Command("docker", "volume", "ls", "-q", "--filter", "label=dev.einsora.workload="+id).Output()
	return strings.Fields(string(out))
}

// The end-to-end test on the real Docker Engine: a static HTTP
// server run with --port and --env serves the value on the published
// port, its log line is read with workload logs, parking closes the port
// and running opens it again, and rm takes the named volume with it.
// Secrets appear in no output; a workload that exits non-zero under a
// restart policy shows its restarts on the timeline.
func TestSoloDockerSpecPortsLogsAndVolumes(t *testing.T) {
	requireDocker(t)
	image := httpImage(t)
	s := startSoloWith(t, t.TempDir(), "docker")
	var outputs []string
	keep := func(o string) string { outputs = append(outputs, o); return o }
	port := freePort(t)
	id := keep(s.must("workload", "create", "--tenant", "local", "--name", "web", "--kind", "container", "--class", "cpu-1",
		"--region", "local", "--image", image, "--command", "http", "--env", "GREETING=hello from einsora",
		"--secret", "TOKEN="+e2eSecret, "--port", strconv.Itoa(port)+":8080", "--volume", "cache:/cache"))
	t.Cleanup(func() {
		exec.Command("docker", "rm", "-f", "einsora-"+id).Run()
		for _, v := range volumesOf(id) {
			exec.Command("docker", "volume", "rm", "-f", v).Run()
		}
	})
	s.wait(id, "running")
	serves := func() (string, error) {
		var got string
		var err error
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if got, err = getEnv(port, "GREETING"); err == nil {
				return got, nil
			}
		}
		return got, err
	}
	if got, err := serves(); err != nil || got != "hello from einsora" {
		t.Fatalf("GET /env/GREETING on port %d: %q, %v\nsolo log:\n%s", port, got, err, s.logs)
	}
	// The secret reached the workload, and only the workload.
	if got, err := getEnv(port, "TOKEN"); err != nil || got != e2eSecret {
		t.Errorf("secret in the container: %v", err)
	}
	if vs := volumesOf(id); len(vs) < 2 {
		t.Errorf("volumes of %s: %v, want the data volume and cache", id, vs)
	}

	var logs string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		logs = keep(s.must("workload", "logs", id))
		if strings.Contains(logs, " stdout get env GREETING") {
			break
		}
	}
	if !strings.Contains(logs, " stdout listening on :8080") || !strings.Contains(logs, " stdout get env GREETING") {
		t.Errorf("workload logs:\n%s", logs)
	}

	s.must("workload", "park", id)
	s.wait(id, "stopped")
	if _, err := getEnv(port, "GREETING"); err == nil {
		t.Errorf("port %d still serves while parked", port)
	}
	s.must("workload", "run", id)
	s.wait(id, "running")
	if got, err := serves(); err != nil || got != "hello from einsora" {
		t.Errorf("after run again: %q, %v", got, err)
	}

	keep(s.must("workload", "show", id))
	keep(s.must("workload", "show", id, "--json"))
	keep(s.must("workload", "ls", "--json"))
	keep(s.must("workload", "timeline", id))
	s.must("workload", "rm", id)
	s.wait(id, "gone")
	if vs := volumesOf(id); len(vs) != 0 {
		t.Errorf("volumes after rm: %v", vs)
	}

	// Restart policy: a workload exiting non-zero is restarted on its
	// machine, each restart on the timeline, then fails.
	job := keep(s.must("workload", "create", "--tenant", "local", "--name", "job", "--kind", "container", "--class", "cpu-1",
		"--region", "local", "--image", image, "--command", "exit 3", "--restart", "on-failure:2"))
	t.Cleanup(func() {
		exec.Command("docker", "rm", "-f", "einsora-"+job).Run()
		exec.Command("docker", "volume", "rm", "-f", "einsora-"+job).Run()
	})
	s.must("workload", "wait", job, "--state", "failed", "--timeout", "60s")
	var tl []struct{ Text string }
	json.Unmarshal([]byte(keep(s.must("workload", "timeline", job, "--json"))), &tl)
	var texts []string
	for _, e := range tl {
		texts = append(texts, e.Text)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"restarted on its machine (restart 1 of on-failure:2)", "restarted on its machine (restart 2 of on-failure:2)", "failed: it exited with code 3"} {
		if !strings.Contains(all, want) {
			t.Errorf("timeline lacks %q:\n%s", want, all)
		}
	}

	outputs = append(outputs, s.logs.String())
	for i, o := range outputs {
		if strings.Contains(o, e2eSecret) {
			t.Errorf("output %d holds the secret", i)
		}
	}
}
