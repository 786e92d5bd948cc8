// Package e2e runs the real binaries: a solo hub with its in-process agent,
// driven through the CLI as a user would.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"einsora.dev/edge/internal/syncbuf"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "einsora-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "../cmd/einsora-hub", "../cmd/einsora-agent")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build binaries:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func bin(name string) string { return filepath.Join(binDir, name) }

// solo is a running `einsora-hub solo`.
type solo struct {
	t      *testing.T
	data   string
	url    string
	cmd    *exec.Cmd
	logs   *syncbuf.Buffer
	exited chan error
}

func startSolo(t *testing.T, data string) *solo {
	t.Helper()
	return startSoloWith(t, data, "sim")
}

func startSoloWith(t *testing.T, data, drivers string) *solo {
	t.Helper()
	cmd := exec.Command(bin("einsora-hub"), "solo", "--data", data, "--admin", "127.0.0.1:0", "--drivers", drivers)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &solo{t: t, data: data, cmd: cmd, logs: logs, exited: make(chan error, 1)}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "admin API on "); ok {
				urls <- strings.TrimSuffix(strings.Fields(rest)[0], ",")
			}
		}
	}()
	go func() { s.exited <- cmd.Wait() }()
	select {
	case s.url = <-urls:
	case err := <-s.exited:
		t.Fatalf("solo exited at start: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("solo did not print its admin address\n%s", logs)
	}
	t.Cleanup(func() { s.stop(syscall.SIGTERM) })
	return s
}

// stop signals solo and waits for it to exit.
func (s *solo) stop(sig syscall.Signal) {
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
		s.t.Errorf("solo did not stop on %v", sig)
	}
}

// hub runs an einsora-hub admin verb against s and returns stdout.
func (s *solo) hub(args ...string) (string, error) {
	args = append(args, "--hub", s.url, "--data", s.data)
	out, err := exec.Command(bin("einsora-hub"), args...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), fmt.Errorf("einsora-hub %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
	}
	return string(out), err
}

func (s *solo) must(args ...string) string {
	s.t.Helper()
	out, err := s.hub(args...)
	if err != nil {
		s.t.Fatalf("%v\nsolo log:\n%s", err, s.logs)
	}
	return strings.TrimSpace(out)
}

type workload struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Machine string `json:"machine"`
	Driver  string `json:"driver"`
	Attempt int64  `json:"attempt"`
	Reason  string `json:"reason"`
}

func (s *solo) show(id string) workload {
	s.t.Helper()
	var w workload
	if err := json.Unmarshal([]byte(s.must("workload", "show", id, "--json")), &w); err != nil {
		s.t.Fatal(err)
	}
	return w
}

func (s *solo) wait(id, state string) {
	s.t.Helper()
	s.must("workload", "wait", id, "--state", state, "--timeout", "30s")
}

func (s *solo) simRecord(id string) map[string]any {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.data, "agent", "sim", id+".json"))
	if err != nil {
		s.t.Fatal(err)
	}
	var rec map[string]any
	json.Unmarshal(b, &rec)
	return rec
}

func TestSoloWorkloadLifecycle(t *testing.T) {
	data := t.TempDir()
	s := startSolo(t, data)
	id := s.must("workload", "create", "--tenant", "local", "--name", "web", "--kind", "container", "--class", "cpu-1", "--region", "local", "--image", "sim:start-delay=200ms")
	s.wait(id, "running")
	w := s.show(id)
	if w.Driver != "sim" || w.Attempt != 1 || w.Machine == "" {
		t.Fatalf("running as %+v", w)
	}

	file := filepath.Join(data, "agent", "sim", id, "data", "notes.txt")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.must("workload", "park", id)
	s.wait(id, "stopped")
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Fatalf("data after park: %q, %v", b, err)
	}

	s.must("workload", "run", id)
	s.wait(id, "running")
	w2 := s.show(id)
	if w2.Attempt != 2 || w2.Machine != w.Machine {
		t.Fatalf("run again: attempt %d on %s, want attempt 2 on %s", w2.Attempt, w2.Machine, w.Machine)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Fatalf("data after run again: %q, %v", b, err)
	}

	s.must("workload", "rm", id)
	s.wait(id, "gone")
	if _, err := os.Stat(filepath.Dir(file)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data after rm: %v, want it gone", err)
	}

	var ls []workload
	json.Unmarshal([]byte(s.must("workload", "ls", "--json")), &ls)
	if len(ls) != 0 {
		t.Errorf("workload ls after rm: %+v", ls)
	}
	var machines []map[string]any
	json.Unmarshal([]byte(s.must("machine", "ls", "--json")), &machines)
	if len(machines) != 1 || machines[0]["owner"] != "local" || machines[0]["online"] != true || machines[0]["sim"] != true {
		t.Errorf("machine ls: %+v", machines)
	}

	// Solo serves the hub's metrics too: two placements (create, run
	// again), and the passes and wake-ups that carried them.
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`einsora_hub_placements_total{outcome="placed",reason="none"} 2`, "einsora_hub_admit_pass_seconds_count", "einsora_hub_wake_latency_seconds_count"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("solo's /metrics lacks %s", want)
		}
	}
	if strings.Contains(string(body), "einsora_hub_admit_pass_seconds_count 0\n") {
		t.Error("no controller pass was measured")
	}
}

func TestSoloTimeline(t *testing.T) {
	s := startSolo(t, t.TempDir())
	id := s.must("workload", "create", "--tenant", "local", "--name", "job", "--kind", "container", "--class", "cpu-1", "--region", "local", "--image", "sim:exit-after=1s,exit-code=7")
	s.wait(id, "failed")
	if w := s.show(id); w.Reason != "it exited with code 7" {
		t.Errorf("got reason %q", w.Reason)
	}
	var tl []struct {
		At   time.Time `json:"at"`
		Text string    `json:"text"`
	}
	if err := json.Unmarshal([]byte(s.must("workload", "timeline", id, "--json")), &tl); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, e := range tl {
		texts = append(texts, e.Text)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"created", "placed on machine", "with driver sim as class cpu-1 (attempt 1)", "running on machine", "failed: it exited with code 7"} {
		if !strings.Contains(all, want) {
			t.Errorf("timeline lacks %q:\n%s", want, all)
		}
	}
}

// A solo killed with SIGKILL while a workload runs comes back with the
// workload still running, its attempt not started again, nothing deleted.
func TestSoloKill9KeepsWorkloadRunning(t *testing.T) {
	data := t.TempDir()
	s := startSolo(t, data)
	id := s.must("workload", "create", "--tenant", "local", "--name", "db", "--kind", "vm", "--class", "cpu-1", "--region", "local", "--image", "sim:")
	s.wait(id, "running")
	file := filepath.Join(data, "agent", "sim", id, "data", "db")
	os.WriteFile(file, []byte("rows"), 0o600)
	s.stop(syscall.SIGKILL)

	s2 := startSolo(t, data)
	s2.wait(id, "running")
	// Several syncs and controller passes, then look again.
	time.Sleep(500 * time.Millisecond)
	w := s2.show(id)
	if w.State != "running" || w.Attempt != 1 {
		t.Fatalf("after kill -9: %+v, want running attempt 1", w)
	}
	rec := s2.simRecord(id)
	if rec["starts"] != float64(1) || rec["running"] != true {
		t.Errorf("sim instance after restart: %v, want started once and running", rec)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "rows" {
		t.Errorf("data after kill -9: %q, %v", b, err)
	}
}

func TestSecondAgentOnSameStateDirFails(t *testing.T) {
	data := t.TempDir()
	s := startSolo(t, data)
	cmd := exec.Command(bin("einsora-agent"), "run", "--state-dir", filepath.Join(data, "agent"), "--drivers", "sim")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("second agent: got %v, want exit 1\n%s", err, out)
	}
	if want := fmt.Sprintf("process %d", s.cmd.Process.Pid); !strings.Contains(string(out), want) {
		t.Errorf("second agent said %q, want it to name %q", out, want)
	}

	// A second solo on the same data directory is refused the same way.
	cmd = exec.Command(bin("einsora-hub"), "solo", "--data", data, "--admin", "127.0.0.1:0")
	out, err = cmd.CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "held by process") {
		t.Errorf("second solo: got %v\n%s", err, out)
	}
}

func TestCLIRefusesBadInput(t *testing.T) {
	s := startSolo(t, t.TempDir())
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown_kind", []string{"workload", "create", "--tenant", "local", "--name", "x", "--kind", "spaceship", "--class", "cpu-1", "--region", "local"}, 2, "unknown kind"},
		{"unknown_class", []string{"workload", "create", "--tenant", "local", "--name", "x", "--kind", "container", "--class", "huge", "--region", "local"}, 1, "no class"},
		{"missing_flag", []string{"workload", "create", "--tenant", "local"}, 2, "required flag"},
		{"unknown_workload", []string{"workload", "show", "w-nope"}, 1, "not found"},
		{"wait_timeout", nil, 1, "did not reach"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if args == nil {
				id := s.must("workload", "create", "--tenant", "local", "--name", "slow", "--kind", "container", "--class", "cpu-1", "--region", "local", "--image", "sim:start-delay=1h")
				args = []string{"workload", "wait", id, "--state", "running", "--timeout", "300ms"}
			}
			args = append(args, "--hub", s.url, "--data", s.data)
			cmd := exec.Command(bin("einsora-hub"), args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tt.code {
				t.Fatalf("got %v, want exit %d; stderr %q", err, tt.code, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			last := lines[len(lines)-1]
			if !strings.Contains(last, tt.want) {
				t.Errorf("stderr %q lacks %q", last, tt.want)
			}
		})
	}
}
