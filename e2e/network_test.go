package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"einsora.dev/edge/internal/syncbuf"
)

// process is a running binary whose stderr is kept.
type process struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	logs   *syncbuf.Buffer
	exited chan error
}

// start runs a binary; lines of its stdout go to the returned channel.
func start(t *testing.T, name string, args ...string) (*process, <-chan string) {
	t.Helper()
	cmd := exec.Command(bin(name), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &process{t: t, name: name, cmd: cmd, logs: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	cmd.Stderr = p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() { p.stop(syscall.SIGTERM) })
	return p, lines
}

// stop signals the process and waits for it; it returns how it exited.
func (p *process) stop(sig syscall.Signal) error {
	if p.cmd.ProcessState != nil {
		return nil
	}
	p.cmd.Process.Signal(sig)
	select {
	case err := <-p.exited:
		return err
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
		p.t.Errorf("%s did not stop on %v\n%s", p.name, sig, p.logs)
		return errors.New("killed")
	}
}

// waitLog waits until the process has logged want.
func (p *process) waitLog(want string, d time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(p.logs.String(), want) {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not log %q within %s:\n%s", p.name, want, d, p.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Four separate processes, as on two machines: `einsora-hub serve`, the
// admin verbs, `einsora-agent enroll`, and `einsora-agent run`, speaking
// HTTPS with mutual TLS on loopback.
func TestNetworkedAgentEnrolsAndRunsAWorkload(t *testing.T) {
	data, state := t.TempDir(), t.TempDir()
	hubProc, lines := start(t, "einsora-hub", "serve", "--data", data, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--region", "eu-1", "--poll-timeout", "3s", "--verbose", "--allow-sim")
	var adminURL, agentURL string
	select {
	case line := <-lines:
		// einsora-hub serve: admin API on URL, agents connect to URL, data in DIR
		if _, rest, ok := strings.Cut(line, "admin API on "); ok {
			adminURL = strings.TrimSuffix(strings.Fields(rest)[0], ",")
		}
		if _, rest, ok := strings.Cut(line, "agents connect to "); ok {
			agentURL = strings.TrimSuffix(strings.Fields(rest)[0], ",")
		}
	case err := <-hubProc.exited:
		t.Fatalf("hub exited at start: %v\n%s", err, hubProc.logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("hub did not print its addresses\n%s", hubProc.logs)
	}
	if !strings.HasPrefix(adminURL, "http://127.0.0.1:") || !strings.HasPrefix(agentURL, "https://127.0.0.1:") {
		t.Fatalf("admin %q, agents %q", adminURL, agentURL)
	}
	if st, err := os.Stat(filepath.Join(data, "ca.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("CA key: %v, %v; want mode 0600", st, err)
	}
	admin := func(args ...string) string {
		t.Helper()
		args = append(args, "--hub", adminURL, "--data", data)
		out, err := exec.Command(bin("einsora-hub"), args...).Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("einsora-hub %s: %v: %s\nhub log:\n%s", strings.Join(args, " "), err, ee.Stderr, hubProc.logs)
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}

	admin("tenant", "create", "acme")
	token := admin("token", "create", "--owner", "acme", "--region", "eu-1", "--ttl", "10m")
	if !strings.HasPrefix(token, "est1.") || strings.Contains(token, "\n") {
		t.Fatalf("token create printed %q", token)
	}
	out, err := exec.Command(bin("einsora-agent"), "enroll", "--hub", agentURL, "--token", token, "--state-dir", state).CombinedOutput()
	if err != nil {
		t.Fatalf("enroll: %v\n%s\nhub log:\n%s", err, out, hubProc.logs)
	}
	if !strings.Contains(string(out), "owner acme, region eu-1") {
		t.Errorf("enroll said %q", out)
	}
	if st, err := os.Stat(filepath.Join(state, "agent.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("agent key: %v, %v; want mode 0600", st, err)
	}
	// The token was single-use.
	out, err = exec.Command(bin("einsora-agent"), "enroll", "--hub", agentURL, "--token", token, "--state-dir", t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "used before") || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Errorf("second enrolment with the same token: %v, %q; want a one-line refusal", err, out)
	}

	agentProc, _ := start(t, "einsora-agent", "run", "--drivers", "sim", "--state-dir", state)
	id := admin("workload", "create", "--tenant", "acme", "--name", "web", "--kind", "container", "--class", "cpu-1", "--region", "eu-1", "--image", "sim:")
	admin("workload", "wait", id, "--state", "running", "--timeout", "60s")

	machineID, _ := os.ReadFile(filepath.Join(state, "machine-id"))
	var m struct {
		ID          string     `json:"id"`
		Owner       string     `json:"owner"`
		Region      string     `json:"region"`
		Online      bool       `json:"online"`
		CertExpires *time.Time `json:"cert_expires"`
	}
	if err := json.Unmarshal([]byte(admin("machine", "show", strings.TrimSpace(string(machineID)), "--json")), &m); err != nil {
		t.Fatal(err)
	}
	if m.Owner != "acme" || m.Region != "eu-1" || !m.Online || m.CertExpires == nil || time.Until(*m.CertExpires) < 29*24*time.Hour {
		t.Errorf("machine show: %+v", m)
	}

	// The doctor sees the agent running, enrolled, and its hub answering.
	out, _ = exec.Command(bin("einsora-agent"), "doctor", "--json", "--drivers", "sim", "--state-dir", state).Output()
	var checks []struct{ Name, Verdict string }
	if err := json.Unmarshal(out, &checks); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	verdicts := map[string]string{}
	for _, c := range checks {
		verdicts[c.Name] = c.Verdict
	}
	for _, name := range []string{"agent running", "enrolment", "certificate", "hub reachable", "revocation"} {
		if verdicts[name] != "ok" {
			t.Errorf("doctor: %s is %q, want ok (%s)", name, verdicts[name], out)
		}
	}
	// sim answers but runs nothing: a warning, never a pass.
	if verdicts["driver sim"] != "warn" {
		t.Errorf("doctor: driver sim is %q, want warn (%s)", verdicts["driver sim"], out)
	}

	// Revoked, the agent is cut off at once and says what to do.
	admin("machine", "revoke", m.ID)
	agentProc.waitLog("revoked", 10*time.Second)

	if err := agentProc.stop(syscall.SIGTERM); err != nil {
		t.Errorf("agent exited with %v on SIGTERM\n%s", err, agentProc.logs)
	}
	if err := hubProc.stop(syscall.SIGTERM); err != nil {
		t.Errorf("hub exited with %v on SIGTERM\n%s", err, hubProc.logs)
	}
	if !strings.Contains(hubProc.logs.String(), "draining") {
		t.Errorf("hub did not drain on SIGTERM:\n%s", hubProc.logs)
	}
}

func TestServeRefusesBadStores(t *testing.T) {
	for _, tt := range []struct{ name, store, want string }{
		{"unknown_scheme", "mysql://u:secret@127.0.0.1/einsora", "want postgres://"},
		// Port 1 on loopback: refused at once, and no name to look up.
		{"unreachable_postgres", "postgres://u:secret@127.0.0.1:1/einsora?connect_timeout=2", "open store"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// A new data directory: the hub makes it 0700, with nothing to say.
			cmd := exec.Command(bin("einsora-hub"), "serve", "--data", filepath.Join(t.TempDir(), "data"), "--store", tt.store, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("got %v, want exit 1\n%s", err, out)
			}
			msg := strings.TrimSpace(string(out))
			if !strings.Contains(msg, tt.want) || strings.Contains(msg, "secret") || strings.Contains(msg, "\n") {
				t.Errorf("got %q, want one line with %q, without the password", msg, tt.want)
			}
		})
	}
}

// The admin API beyond loopback needs TLS or the operator's explicit
// acceptance of cleartext: without either the hub says so in one line.
func TestServeRefusesCleartextAdminBeyondLoopback(t *testing.T) {
	cmd := exec.Command(bin("einsora-hub"), "serve", "--data", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0", "--admin", "0.0.0.0:0")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("got %v, want exit 1\n%s", err, out)
	}
	msg := strings.TrimSpace(string(out))
	if !strings.Contains(msg, "--admin-tls-cert") || !strings.Contains(msg, "--admin-insecure") || strings.Contains(msg, "\n") {
		t.Errorf("got %q, want one line naming --admin-tls-cert and --admin-insecure", msg)
	}
}

// Solo's admin API has no TLS: beyond loopback it needs --admin-insecure.
func TestSoloRefusesCleartextAdminBeyondLoopback(t *testing.T) {
	cmd := exec.Command(bin("einsora-hub"), "solo", "--data", filepath.Join(t.TempDir(), "data"), "--drivers", "sim", "--admin", "0.0.0.0:0")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("got %v, want exit 1\n%s", err, out)
	}
	// The sim driver's warning may come first; the error is the last line.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if msg := lines[len(lines)-1]; !strings.HasPrefix(msg, "einsora-hub: solo: --admin") || !strings.Contains(msg, "--admin-insecure") {
		t.Errorf("got %q, want a line naming --admin-insecure", out)
	}
}

func TestEnrollRefusesBadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad_token", []string{"--hub", "https://127.0.0.1:1", "--token", "nope"}, 2, "est1."},
		{"http_hub", []string{"--hub", "http://127.0.0.1:1", "--token", "est1." + strings.Repeat("A", 43) + "." + strings.Repeat("A", 43)}, 2, "https://"},
		{"no_hub_there", []string{"--hub", "https://127.0.0.1:1", "--token", "est1." + strings.Repeat("A", 43) + "." + strings.Repeat("A", 43)}, 1, "enrol with https://127.0.0.1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"enroll", "--state-dir", t.TempDir()}, tt.args...)
			var stderr bytes.Buffer
			cmd := exec.Command(bin("einsora-agent"), args...)
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tt.code {
				t.Fatalf("got %v, want exit %d; stderr %q", err, tt.code, stderr.String())
			}
			if msg := strings.TrimSpace(stderr.String()); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Errorf("stderr %q: want one line containing %q", msg, tt.want)
			}
		})
	}
}
