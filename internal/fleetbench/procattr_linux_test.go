package fleetbench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// In a child of the test (TestServersDieWithTheBench), start a server and
// exit at once, as an interrupted bench would, printing the server's PID.
func TestHelperBenchThatDies(t *testing.T) {
	if os.Getenv("FLEETBENCH_HELPER_DIR") == "" {
		t.Skip("runs as TestServersDieWithTheBench's child")
	}
	p, _, err := startProcess(exec.Command("sh", "-c", "echo agents connect to; exec sleep 60"), filepath.Join(os.Getenv("FLEETBENCH_HELPER_DIR"), "server.log"), "agents connect to")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("server", p.cmd.Process.Pid)
	os.Exit(0)
}

// A server process outlives no bench: killed or not, the bench takes its
// servers with it.
func TestServersDieWithTheBench(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBenchThatDies$")
	cmd.Env = append(os.Environ(), "FLEETBENCH_HELPER_DIR="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	var pid int
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "server "); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid == 0 {
		t.Fatalf("the helper named no server: %s", out)
	}
	for deadline := time.Now().Add(10 * time.Second); alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			exec.Command("kill", "-9", strconv.Itoa(pid)).Run()
			t.Fatalf("server %d still runs after its bench exited", pid)
		}
	}
}

// alive reports whether pid runs: neither gone nor a zombie left to reap.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}
