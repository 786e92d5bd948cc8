package e2e

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// workload logs in solo reads the in-process agent's ring: the sim driver
// writes a line per state change.
func TestSoloWorkloadLogs(t *testing.T) {
	s := startSolo(t, t.TempDir())
	id := s.must("workload", "create", "--tenant", "local", "--name", "web", "--kind", "container", "--class", "cpu-1",
		"--region", "local", "--image", "sim:")
	s.wait(id, "running")
	var out string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		out = s.must("workload", "logs", id)
		if strings.Contains(out, "sim: "+id+" attempt 1 is running") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(out, " system sim: "+id+" attempt 1 is running") {
		t.Fatalf("workload logs:\n%s", out)
	}
	if tail := s.must("workload", "logs", id, "--tail", "1"); strings.Count(tail, "\n") != 0 || !strings.Contains(tail, "is running") {
		t.Errorf("--tail 1:\n%s", tail)
	}
	if _, err := s.hub("workload", "logs", id, "--tail", "-1"); err == nil || !strings.Contains(err.Error(), "--tail") {
		t.Errorf("--tail -1: %v", err)
	}

	// --follow prints new lines and ends when the workload is removed.
	cmd := exec.Command(bin("einsora-hub"), "workload", "logs", id, "--follow", "--hub", s.url, "--data", s.data)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		if !strings.Contains(l, "is running") {
			t.Errorf("first followed line %q", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no line from --follow")
	}
	s.must("workload", "rm", id)
	ended := make(chan error, 1)
	go func() {
		for range lines {
		}
		ended <- cmd.Wait()
	}()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("--follow ended with %v", err)
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("--follow did not end when the workload was removed")
	}
}
