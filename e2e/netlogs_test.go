package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"einsora.dev/edge/internal/syncbuf"
)

// networkedHub starts `einsora-hub serve` and one enrolled agent running
// sim, speaking HTTPS with mutual TLS on loopback.
type networkedHub struct {
	t                 *testing.T
	data, state       string
	adminURL          string
	hubProc, agentPrc *process
	outputs           []string
}

func startNetworked(t *testing.T) *networkedHub {
	t.Helper()
	n := &networkedHub{t: t, data: t.TempDir(), state: t.TempDir()}
	var lines <-chan string
	n.hubProc, lines = start(t, "einsora-hub", "serve", "--data", n.data, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--region", "eu-1", "--poll-timeout", "3s", "--allow-sim")
	var agentURL string
	select {
	case line := <-lines:
		if _, rest, ok := strings.Cut(line, "admin API on "); ok {
			n.adminURL = strings.TrimSuffix(strings.Fields(rest)[0], ",")
		}
		if _, rest, ok := strings.Cut(line, "agents connect to "); ok {
			agentURL = strings.TrimSuffix(strings.Fields(rest)[0], ",")
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("hub did not print its addresses\n%s", n.hubProc.logs)
	}
	n.must("tenant", "create", "acme")
	token := n.must("token", "create", "--owner", "acme", "--region", "eu-1", "--ttl", "10m")
	if out, err := exec.Command(bin("einsora-agent"), "enroll", "--hub", agentURL, "--token", token, "--state-dir", n.state).CombinedOutput(); err != nil {
		t.Fatalf("enroll: %v\n%s", err, out)
	}
	n.agentPrc, _ = start(t, "einsora-agent", "run", "--drivers", "sim", "--state-dir", n.state)
	return n
}

func (n *networkedHub) hub(args ...string) (string, error) {
	args = append(args, "--hub", n.adminURL, "--data", n.data)
	out, err := exec.Command(bin("einsora-hub"), args...).Output()
	n.outputs = append(n.outputs, string(out))
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		n.outputs = append(n.outputs, string(ee.Stderr))
		return string(out), errors.New(strings.TrimSpace(string(ee.Stderr)))
	}
	return string(out), err
}

func (n *networkedHub) must(args ...string) string {
	n.t.Helper()
	out, err := n.hub(args...)
	if err != nil {
		n.t.Fatalf("einsora-hub %s: %v\nhub log:\n%s", strings.Join(args, " "), err, n.hubProc.logs)
	}
	return strings.TrimSpace(out)
}

// The spec and logs over the network: the sim agent gets the spec with
// its secret, serves the published port, uploads its output over its own
// mutual-TLS request; --follow ends with the workload; a silent machine
// is named within seconds; no secret in any output or log.
func TestNetworkedSpecAndLogs(t *testing.T) {
	n := startNetworked(t)
	port := freePort(t)
	id := n.must("workload", "create", "--tenant", "acme", "--name", "web", "--kind", "container", "--class", "cpu-1",
		"--region", "eu-1", "--image", "sim:listen", "--env", "GREETING=hi", "--secret", "TOKEN="+e2eSecret,
		"--port", strconv.Itoa(port)+":80", "--restart", "always")
	n.must("workload", "wait", id, "--state", "running", "--timeout", "60s")
	if line, err := readLine("127.0.0.1:" + strconv.Itoa(port)); err != nil || line != "sim "+id+"\n" {
		t.Errorf("published port: %q, %v", line, err)
	}
	rec, err := os.ReadFile(filepath.Join(n.state, "sim", id+".json"))
	if err != nil || !strings.Contains(string(rec), e2eSecret) {
		t.Errorf("the driver did not get the secret: %v", err)
	}

	// A second workload on the same host port waits, and says why.
	id2 := n.must("workload", "create", "--tenant", "acme", "--name", "web2", "--kind", "container", "--class", "cpu-1",
		"--region", "eu-1", "--image", "sim:", "--port", strconv.Itoa(port)+":81")
	n.must("workload", "wait", id2, "--state", "queued", "--timeout", "30s")
	if show := n.must("workload", "show", id2); !strings.Contains(show, "has host port "+strconv.Itoa(port)+"/tcp free") {
		t.Errorf("queued reason:\n%s", show)
	}

	var out string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		out, err = n.hub("workload", "logs", id)
		if err == nil && strings.Contains(out, "sim: "+id+" attempt 1 is running") {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !strings.Contains(out, " system sim: "+id+" attempt 1 is running") {
		t.Fatalf("workload logs: %v\n%s\nhub log:\n%s", err, out, n.hubProc.logs)
	}

	// --follow ends when the workload is removed.
	cmd := exec.Command(bin("einsora-hub"), "workload", "logs", id, "--follow", "--hub", n.adminURL, "--data", n.data)
	var followOut syncbuf.Buffer
	cmd.Stdout = &followOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(followOut.String(), "is running") }, 15*time.Second, "a followed line")
	n.must("workload", "rm", id)
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("--follow ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("--follow did not end when the workload was removed")
	}
	n.outputs = append(n.outputs, followOut.String())

	// The second workload gets the port now; then its agent goes silent:
	// logs fail within seconds, naming the machine.
	n.must("workload", "wait", id2, "--state", "running", "--timeout", "60s")
	n.agentPrc.stop(syscall.SIGKILL)
	machineID, _ := os.ReadFile(filepath.Join(n.state, "machine-id"))
	began := time.Now()
	_, err = n.hub("workload", "logs", id2)
	if err == nil || !strings.Contains(err.Error(), "machine "+strings.TrimSpace(string(machineID))) || strings.Contains(err.Error(), "\n") {
		t.Errorf("logs of a silent machine: %v", err)
	}
	if took := time.Since(began); took > 15*time.Second {
		t.Errorf("logs of a silent machine took %s", took)
	}

	n.hubProc.stop(syscall.SIGTERM)
	all := strings.Join(n.outputs, "\n") + n.hubProc.logs.String() + n.agentPrc.logs.String()
	if strings.Contains(all, e2eSecret) {
		t.Error("a secret appeared in an output or a log")
	}
}

func waitFor(t *testing.T, ok func() bool, d time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
