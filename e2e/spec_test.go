package e2e

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const e2eSecret = "e2e-secret-7f3a9c-do-not-print"

// freePort returns a TCP port on 127.0.0.1 nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func readLine(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	return bufio.NewReader(c).ReadString('\n')
}

// The spec through the CLI, the hub and the in-process agent to the sim
// driver: the published port serves while running, closes when parked;
// secrets reach the driver and no output.
func TestSoloSpecThroughTheCLI(t *testing.T) {
	data := t.TempDir()
	s := startSolo(t, data)
	port := freePort(t)
	var outputs []string
	keep := func(out string) string { outputs = append(outputs, out); return out }

	// Bad input is refused before anything is stored, naming the field.
	for flag, value := range map[string]string{"--port": "8080", "--env": "NOEQUALS", "--restart": "sometimes",
		"--workdir": "relative", "--volume": "../x:/data", "--command": "'unterminated"} {
		out, err := s.hub("workload", "create", "--tenant", "local", "--name", "bad", "--kind", "container", "--class", "cpu-1",
			"--region", "local", "--image", "sim:", flag, value)
		keep(out)
		if err == nil {
			t.Errorf("%s %s accepted", flag, value)
			continue
		}
		msg := err.Error()
		keep(msg)
		field := strings.TrimPrefix(flag, "--")
		if !strings.Contains(msg, field) {
			t.Errorf("%s %s: error does not name the field: %v", flag, value, msg)
		}
	}
	if ls := keep(s.must("workload", "ls", "--json")); ls != "[]" {
		t.Errorf("after refusals: %s", ls)
	}

	id := keep(s.must("workload", "create", "--tenant", "local", "--name", "web", "--kind", "container", "--class", "cpu-1",
		"--region", "local", "--image", "sim:listen", "--command", `serve --greeting "hello world"`, "--arg", "--verbose",
		"--env", "GREETING=hi", "--secret", "TOKEN="+e2eSecret, "--port", strconv.Itoa(port)+":80",
		"--workdir", "/srv", "--volume", "data:/data", "--restart", "on-failure:3"))
	s.wait(id, "running")
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if line, err := readLine(addr); err != nil || line != "sim "+id+"\n" {
		t.Fatalf("port %d while running: %q, %v", port, line, err)
	}
	show := keep(s.must("workload", "show", id))
	for _, want := range []string{"command:  serve --greeting 'hello world' --verbose", "env:      GREETING=hi",
		"secret:   TOKEN=(secret)", "port:     " + strconv.Itoa(port) + ":80/tcp", "workdir:  /srv", "volume:   data:/data",
		"restart:  on-failure:3"} {
		if !strings.Contains(show, want) {
			t.Errorf("show lacks %q:\n%s", want, show)
		}
	}
	// The driver got the secret (the sim's record is the agent's, 0600).
	rec := s.simRecord(id)
	spec, _ := rec["spec"].(map[string]any)
	if se, _ := spec["secret_env"].(map[string]any); se["TOKEN"] != e2eSecret {
		t.Errorf("driver's spec: %v", spec)
	}

	s.must("workload", "park", id)
	s.wait(id, "stopped")
	if _, err := readLine(addr); err == nil {
		t.Errorf("port %d still serves while parked", port)
	}
	s.must("workload", "run", id)
	s.wait(id, "running")
	if line, err := readLine(addr); err != nil || line != "sim "+id+"\n" {
		t.Errorf("port %d after run again: %q, %v", port, line, err)
	}

	keep(s.must("workload", "show", id, "--json"))
	keep(s.must("workload", "ls"))
	keep(s.must("workload", "ls", "--json"))
	keep(s.must("workload", "timeline", id))
	keep(s.must("workload", "timeline", id, "--json"))
	s.stop(syscall.SIGTERM)
	outputs = append(outputs, s.logs.String())
	for i, out := range outputs {
		if strings.Contains(out, e2eSecret) {
			t.Errorf("output %d holds the secret:\n%s", i, out)
		}
	}
	// At rest the hub's store holds it sealed.
	for _, f := range []string{"hub.db", "hub.db-wal"} {
		if b, _ := os.ReadFile(filepath.Join(data, f)); strings.Contains(string(b), e2eSecret) {
			t.Errorf("%s holds the secret in clear", f)
		}
	}
}
