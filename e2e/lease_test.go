package e2e

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Two hub processes on one SQLite file: one leads the region, the other
// stands by. Killed with SIGKILL, the leader cannot step down; the standby
// takes over once the lease expires, under a new epoch, and the audit of
// admits in both logs shows the two never admitting at once.
func TestStandbyTakesOverFromAKilledLeader(t *testing.T) {
	data := t.TempDir()
	type hubProc struct {
		p     *process
		admin string
	}
	startHub := func() hubProc {
		p, lines := start(t, "einsora-hub", "serve", "--data", data, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
			"--lease-ttl", "2s", "--allow-sim")
		select {
		case line := <-lines:
			_, rest, _ := strings.Cut(line, "admin API on ")
			return hubProc{p: p, admin: strings.TrimSuffix(strings.Fields(rest + " x")[0], ",")}
		case err := <-p.exited:
			t.Fatalf("hub exited at start: %v\n%s", err, p.logs)
		case <-time.After(30 * time.Second):
			t.Fatalf("hub did not print its addresses\n%s", p.logs)
		}
		return hubProc{}
	}
	a := startHub()
	a.p.waitLog("leading the region", 20*time.Second)
	b := startHub()
	admin := func(h hubProc, args ...string) string {
		t.Helper()
		out, err := exec.Command(bin("einsora-hub"), append(args, "--hub", h.admin, "--data", data)...).CombinedOutput()
		if err != nil {
			t.Fatalf("einsora-hub %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// No machine: the leader queues what it admits, and says so.
	admin(a, "tenant", "create", "acme")
	w1 := admin(a, "workload", "create", "--tenant", "acme", "--name", "one", "--kind", "container", "--class", "cpu-1", "--region", "local")
	a.p.waitLog("workload="+w1, 20*time.Second)
	if strings.Contains(b.p.logs.String(), "leading the region") {
		t.Fatalf("the standby leads while the leader lives:\n%s", b.p.logs)
	}

	a.p.stop(syscall.SIGKILL)
	killed := time.Now()
	w2 := admin(b, "workload", "create", "--tenant", "acme", "--name", "two", "--kind", "container", "--class", "cpu-1", "--region", "local")
	b.p.waitLog("workload="+w2, 30*time.Second)
	if time.Since(killed) < time.Second {
		t.Errorf("the standby admitted %s after the leader died; the lease cannot have expired", time.Since(killed))
	}

	epochs := func(logs string) []int {
		var out []int
		for _, m := range regexp.MustCompile(`admit: \w+".*?epoch=(\d+)`).FindAllStringSubmatch(logs, -1) {
			n, _ := strconv.Atoi(m[1])
			out = append(out, n)
		}
		return out
	}
	ea, eb := epochs(a.p.logs.String()), epochs(b.p.logs.String())
	if len(ea) == 0 || len(eb) == 0 {
		t.Fatalf("audit: leader admitted under epochs %v, standby under %v; want both", ea, eb)
	}
	for _, x := range ea {
		for _, y := range eb {
			if y <= x {
				t.Errorf("audit: the standby admitted under epoch %d, not after the leader's %d", y, x)
			}
		}
	}
}
