package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"einsora.dev/edge/internal/pgtest"
	"einsora.dev/edge/internal/tcprelay"
	"einsora.dev/edge/internal/testnet"
)

// The replica tests run three `einsora-hub serve` processes on one real
// PostgreSQL, each reaching it through a TCP relay of its own that the test
// can cut, and real agents naming every replica. They take a few minutes,
// so they run when EINSORA_E2E_REPLICAS=1 (.ci/run's step after make test)
// and never under -short.
const replicasEnv = "EINSORA_E2E_REPLICAS"

// leaseTTL is every replica's --lease-ttl: short, so failovers fit a test.
const leaseTTL = 2 * time.Second

type replica struct {
	name  string
	p     *process
	relay *tcprelay.Relay
	data  string
	admin string // the admin API's URL
	agent string // the agents' URL
}

type replicaSet struct {
	t      *testing.T
	reps   []*replica
	agents []*process
}

// startReplicas starts n replicas on a fresh schema of the test
// PostgreSQL, each through its own relay, with flags added; the first
// makes the data directory the others copy, and leads the region.
func startReplicas(t *testing.T, n int, flags ...string) *replicaSet {
	t.Helper()
	if testing.Short() {
		t.Skip("replicas under faults take minutes; not with -short")
	}
	if os.Getenv(replicasEnv) != "1" {
		t.Skipf("replicas under faults take minutes; set %s=1 to run them", replicasEnv)
	}
	dsn := pgtest.Schema(t)
	network, target, err := pgtest.Target(dsn)
	if err != nil {
		t.Fatal(err)
	}
	rs := &replicaSet{t: t}
	for i := range n {
		relay, err := tcprelay.Listen(network, target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { relay.Close() })
		storeURL, err := pgtest.URL(dsn, relay.Addr())
		if err != nil {
			t.Fatal(err)
		}
		data := t.TempDir()
		if i > 0 {
			copyDir(t, rs.reps[0].data, data)
		}
		port := testnet.FreePort(t)
		url := fmt.Sprintf("https://127.0.0.1:%d", port)
		args := append([]string{"serve", "--data", data, "--store", storeURL, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--admin", "127.0.0.1:0", "--url", url, "--allow-sim", "--lease-ttl", leaseTTL.String()}, flags...)
		p, lines := start(t, "einsora-hub", args...)
		r := &replica{name: fmt.Sprintf("r%d", i), p: p, relay: relay, data: data}
		p.name = "replica " + r.name
		select {
		case line := <-lines:
			if _, rest, ok := strings.Cut(line, "admin API on "); ok {
				r.admin = strings.TrimSuffix(strings.Fields(rest)[0], ",")
			}
			if _, rest, ok := strings.Cut(line, "agents connect to "); ok {
				r.agent = strings.TrimSuffix(strings.Fields(rest)[0], ",")
			}
		case err := <-p.exited:
			t.Fatalf("replica %s exited at start: %v\n%s", r.name, err, p.logs)
		case <-time.After(60 * time.Second):
			t.Fatalf("replica %s did not print its addresses\n%s", r.name, p.logs)
		}
		if r.agent != url {
			t.Fatalf("replica %s: agents connect to %q, want %q", r.name, r.agent, url)
		}
		if i == 0 {
			p.waitLog("leading the region", 30*time.Second)
		}
		rs.reps = append(rs.reps, r)
	}
	return rs
}

// copyDir copies the files of a replica's data directory, modes kept.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// run runs an admin verb against r and returns its stdout.
func (r *replica) run(args ...string) (string, error) {
	args = append(args, "--hub", r.admin, "--data", r.data)
	out, err := exec.Command(bin("einsora-hub"), args...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), fmt.Errorf("einsora-hub %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
	}
	return strings.TrimSpace(string(out)), err
}

// must runs an admin verb against r, failing the test (with every
// replica's log) if it fails.
func (rs *replicaSet) must(r *replica, args ...string) string {
	rs.t.Helper()
	out, err := r.run(args...)
	if err != nil {
		rs.t.Fatalf("%v\n%s", err, rs.logs())
	}
	return out
}

func (rs *replicaSet) logs() string {
	var b strings.Builder
	for _, r := range rs.reps {
		fmt.Fprintf(&b, "--- replica %s:\n%s\n", r.name, r.p.logs)
	}
	for _, a := range rs.agents {
		fmt.Fprintf(&b, "--- %s:\n%s\n", a.name, a.logs)
	}
	return b.String()
}

// enrol enrols a machine through r and starts its agent, which names
// every other replica too, after r.
func (rs *replicaSet) enrol(r *replica) (state string, agent *process) {
	rs.t.Helper()
	token := rs.must(r, "token", "create", "--owner", "acme", "--region", "local", "--ttl", "10m")
	state = rs.t.TempDir()
	out, err := exec.Command(bin("einsora-agent"), "enroll", "--hub", r.agent, "--token", token, "--state-dir", state).CombinedOutput()
	if err != nil {
		rs.t.Fatalf("enroll through %s: %v\n%s\n%s", r.name, err, out, rs.logs())
	}
	// A made-up inventory with room for every workload a test creates,
	// whatever this host's CPUs.
	inv := filepath.Join(state, "inventory.json")
	if err := os.WriteFile(inv, []byte(`{"os": "linux", "arch": "amd64", "cpus": 32, "memory_mb": 65536, "drivers": ["sim"]}`), 0o600); err != nil {
		rs.t.Fatal(err)
	}
	args := []string{"run", "--drivers", "sim", "--state-dir", state, "--inventory-file", inv}
	for _, o := range rs.reps {
		if o != r {
			args = append(args, "--hub", o.agent)
		}
	}
	agent, _ = start(rs.t, "einsora-agent", args...)
	agent.name = "agent enrolled through " + r.name
	rs.agents = append(rs.agents, agent)
	return state, agent
}

func (rs *replicaSet) create(r *replica, name string) string {
	rs.t.Helper()
	return rs.must(r, "workload", "create", "--tenant", "acme", "--name", name, "--kind", "container", "--class", "cpu-1", "--region", "local", "--image", "sim:")
}

func (rs *replicaSet) workloads(r *replica) []workload {
	rs.t.Helper()
	var ws []workload
	if err := json.Unmarshal([]byte(rs.must(r, "workload", "ls", "--json")), &ws); err != nil {
		rs.t.Fatal(err)
	}
	return ws
}

type machineView struct {
	ID       string     `json:"id"`
	Online   bool       `json:"online"`
	LastSync *time.Time `json:"last_sync"`
	Desired  int64      `json:"desired_generation"`
	Applied  int64      `json:"applied_generation"`
}

func (rs *replicaSet) machines(r *replica) []machineView {
	rs.t.Helper()
	var ms []machineView
	if err := json.Unmarshal([]byte(rs.must(r, "machine", "ls", "--json")), &ms); err != nil {
		rs.t.Fatal(err)
	}
	return ms
}

func (rs *replicaSet) timeline(r *replica, id string) string {
	rs.t.Helper()
	var tl []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal([]byte(rs.must(r, "workload", "timeline", id, "--json")), &tl); err != nil {
		rs.t.Fatal(err)
	}
	var texts []string
	for _, e := range tl {
		texts = append(texts, e.Text)
	}
	return strings.Join(texts, "\n")
}

// simRunning reports how the sim driver of the agent with state dir
// state holds workload id: started how many times, running or not.
func simRunning(t *testing.T, state, id string) (starts float64, running bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, "sim", id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	starts, _ = rec["starts"].(float64)
	running, _ = rec["running"].(bool)
	return starts, running
}

// logTime is the time= of the first line of logs holding want; zero if
// none.
func logTime(logs, want string) time.Time {
	for line := range strings.SplitSeq(logs, "\n") {
		if !strings.Contains(line, want) {
			continue
		}
		if m := regexp.MustCompile(`time=(\S+)`).FindStringSubmatch(line); m != nil {
			at, _ := time.Parse(time.RFC3339Nano, m[1])
			return at
		}
	}
	return time.Time{}
}

// placement is one committed admit of a workload, from a replica's audit.
type placement struct {
	workload, machine string
	attempt, epoch    int
}

var placedRE = regexp.MustCompile(`msg="admit: placed".*?workload=(\S+).*?machine=(\S+).*?attempt=(\d+).*?epoch=(\d+)`)

func placements(logs string) []placement {
	var out []placement
	for _, m := range placedRE.FindAllStringSubmatch(logs, -1) {
		attempt, _ := strconv.Atoi(m[3])
		epoch, _ := strconv.Atoi(m[4])
		out = append(out, placement{workload: m[1], machine: m[2], attempt: attempt, epoch: epoch})
	}
	return out
}

// eventually polls cond every 200 ms until it holds or d passes.
func (rs *replicaSet) eventually(d time.Duration, what string, cond func() bool) {
	rs.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			rs.t.Fatalf("%s: not within %s\n%s", what, d, rs.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A replica cut off from the store, with agents on it, past
// --offline-fail-after: its agents move to the other replicas, nothing
// they run is failed, stopped or parked, and the timelines say no
// failure. (The fault first seen: the cut replica held its agents' polls
// and answered 500, the agents retried only it, the leader failed their
// running workloads, and after the heal the hub told the agent to park
// what it had failed.)
func TestCutReplicasAgentsMoveAndNothingFails(t *testing.T) {
	const failAfter = 20 * time.Second
	rs := startReplicas(t, 3, "--offline-after", "6s", "--offline-fail-after", failAfter.String())
	leader, cut := rs.reps[0], rs.reps[1]
	rs.must(leader, "tenant", "create", "acme")
	states := map[string]string{} // machine ID -> state dir
	for range 2 {
		state, _ := rs.enrol(cut)
		id, err := os.ReadFile(filepath.Join(state, "machine-id"))
		if err != nil {
			t.Fatal(err)
		}
		states[strings.TrimSpace(string(id))] = state
	}
	var ids []string
	for i := range 4 {
		ids = append(ids, rs.create(leader, fmt.Sprintf("w%d", i)))
	}
	for _, id := range ids {
		rs.must(leader, "workload", "wait", id, "--state", "running", "--timeout", "60s")
	}
	on := map[string]string{} // workload -> machine
	for _, w := range rs.workloads(leader) {
		on[w.ID] = w.Machine
	}

	cut.relay.Cut()
	cutAt := time.Now()
	// A cut replica cannot write: a last sync after the cut, on the
	// leader, was written by another replica, which the agent reached.
	moved := func() bool {
		ms := rs.machines(leader)
		for _, m := range ms {
			if m.LastSync == nil || !m.LastSync.After(cutAt) || !m.Online {
				return false
			}
		}
		return len(ms) == len(states)
	}
	rs.eventually(failAfter, "every agent of the cut replica syncing with another", moved)
	back := time.Since(cutAt)
	t.Logf("FIGURE cut replica's agents all syncing with another replica after %s (presence batches every 2s, --offline-after 6s)", back.Round(100*time.Millisecond))
	// The cut replica says it is not ready.
	if resp, err := http.Get(cut.admin + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("cut replica's /readyz: %v %v, want 503", resp, err)
	} else {
		resp.Body.Close()
	}
	// Stay cut past --offline-fail-after, watching that nothing fails.
	for time.Since(cutAt) < failAfter+10*time.Second {
		for _, w := range rs.workloads(leader) {
			if w.State != "running" {
				t.Fatalf("%s is %s (%s) %s into the cut\n%s", w.ID, w.State, w.Reason, time.Since(cutAt).Round(time.Second), rs.logs())
			}
		}
		time.Sleep(time.Second)
	}

	cut.relay.Heal()
	cut.p.waitLog("presence batch written again", 30*time.Second)
	// A new workload placed and running after the heal: the agents have
	// applied a desired state written since, so a park, had the hub
	// ordered one, would have been applied too.
	after := rs.create(cut, "after-heal")
	rs.must(cut, "workload", "wait", after, "--state", "running", "--timeout", "60s")
	for _, m := range rs.machines(leader) {
		// The agent reports what it applied on its next sync, which may
		// be a poll held for --poll-timeout (10 minutes by default),
		// cut short by the news of what it applied.
		rs.eventually(60*time.Second, "machine "+m.ID+" applying its desired state", func() bool {
			var g machineView
			json.Unmarshal([]byte(rs.must(leader, "machine", "show", m.ID, "--json")), &g)
			return g.Applied == g.Desired
		})
	}
	for _, id := range ids {
		w := rs.show(leader, id)
		if w.State != "running" || w.Attempt != 1 || w.Machine != on[id] {
			t.Errorf("after the heal %s is %+v, want running attempt 1 on %s", id, w, on[id])
		}
		if starts, running := simRunning(t, states[on[id]], id); starts != 1 || !running {
			t.Errorf("the agent holds %s started %v times, running %v; want started once and running", id, starts, running)
		}
		tl := rs.timeline(leader, id)
		t.Logf("timeline of %s after the cut and heal:\n%s", id, tl)
		for _, lie := range []string{"failed", "stopped", "park"} {
			if strings.Contains(tl, lie) {
				t.Errorf("timeline of %s says %q, but nothing failed or stopped:\n%s", id, lie, tl)
			}
		}
	}
	for _, r := range rs.reps {
		if logs := r.p.logs.String(); strings.Contains(logs, "kept running") && strings.Contains(logs, "offline for") {
			t.Errorf("replica %s logs both a failure for being offline and that workloads kept running:\n%s", r.name, logs)
		}
	}
}

func (rs *replicaSet) show(r *replica, id string) workload {
	rs.t.Helper()
	var w workload
	if err := json.Unmarshal([]byte(rs.must(r, "workload", "show", id, "--json")), &w); err != nil {
		rs.t.Fatal(err)
	}
	return w
}

// The leader killed (SIGKILL) and then the next leader paused (SIGSTOP)
// past its lease, on PostgreSQL: a standby leads each time under a new
// epoch, no workload is placed twice, the paused leader writes nothing once
// resumed, and the store's placements are exactly the committed admits of
// the replicas' audit lines.
func TestLeaderKilledAndPausedPastItsLease(t *testing.T) {
	rs := startReplicas(t, 3)
	first := rs.reps[0]
	rs.must(first, "tenant", "create", "acme")
	rs.enrol(rs.reps[1])
	var ids []string
	batch := func(r *replica, prefix string) {
		t.Helper()
		var now []string
		for i := range 3 {
			now = append(now, rs.create(r, fmt.Sprintf("%s%d", prefix, i)))
		}
		for _, id := range now {
			rs.must(r, "workload", "wait", id, "--state", "running", "--timeout", "60s")
		}
		ids = append(ids, now...)
	}
	batch(first, "a")
	for _, r := range rs.reps[1:] {
		if strings.Contains(r.p.logs.String(), "leading the region") {
			t.Fatalf("standby %s leads while the leader lives\n%s", r.name, rs.logs())
		}
	}

	first.p.stop(syscall.SIGKILL)
	killedAt := time.Now()
	batch(rs.reps[1], "b")
	var second, third *replica
	for _, r := range rs.reps[1:] {
		if strings.Contains(r.p.logs.String(), "leading the region") {
			if second != nil {
				t.Fatalf("both standbys lead after the leader's SIGKILL\n%s", rs.logs())
			}
			second = r
		} else {
			third = r
		}
	}
	if second == nil {
		t.Fatalf("no standby leads after the leader's SIGKILL\n%s", rs.logs())
	}
	t.Logf("FIGURE failover after SIGKILL of the leader: %s (--lease-ttl %s)",
		logTime(second.p.logs.String(), "leading the region").Sub(killedAt).Round(10*time.Millisecond), leaseTTL)

	// Pause the second leader past its lease while work arrives: the
	// third takes over.
	second.p.cmd.Process.Signal(syscall.SIGSTOP)
	// Resumed before its stop, should the test end while it is paused.
	t.Cleanup(func() { second.p.cmd.Process.Signal(syscall.SIGCONT) })
	pausedAt := time.Now()
	batch(third, "c")
	third.p.waitLog("leading the region", 30*time.Second)
	for time.Since(pausedAt) < 3*leaseTTL {
		time.Sleep(100 * time.Millisecond)
	}
	resumedFrom := len(second.p.logs.String())
	second.p.cmd.Process.Signal(syscall.SIGCONT)
	// A create on the resumed replica wakes whichever leads; its admit
	// is the third's.
	batch(second, "d")
	second.p.waitLog("stepped down", 30*time.Second)

	firstP, secondP, thirdP := placements(first.p.logs.String()), placements(second.p.logs.String()), placements(third.p.logs.String())
	epochOf := func(ps []placement) map[int]bool {
		e := map[int]bool{}
		for _, p := range ps {
			e[p.epoch] = true
		}
		return e
	}
	if len(firstP) == 0 || len(secondP) == 0 || len(thirdP) == 0 {
		t.Fatalf("audit: placements by the first %v, second %v, third %v; want each to have admitted", firstP, secondP, thirdP)
	}
	maxEpoch := func(ps []placement) int {
		n := 0
		for e := range epochOf(ps) {
			n = max(n, e)
		}
		return n
	}
	for e := range epochOf(secondP) {
		if e <= maxEpoch(firstP) {
			t.Errorf("audit: the second leader admitted under epoch %d, not after the killed leader's %d", e, maxEpoch(firstP))
		}
	}
	for e := range epochOf(thirdP) {
		if e <= maxEpoch(secondP) {
			t.Errorf("audit: the third leader admitted under epoch %d, not after the paused leader's %d", e, maxEpoch(secondP))
		}
	}
	for _, p := range placements(second.p.logs.String()[resumedFrom:]) {
		if p.epoch != maxEpoch(secondP) || len(epochOf(secondP)) != 1 {
			t.Errorf("audit: after its pause the second leader logged %+v; want nothing but its old epoch %d", p, maxEpoch(secondP))
		}
	}
	// The union of committed admits is the store's placements, each once.
	audit := map[string]placement{}
	for _, ps := range [][]placement{firstP, secondP, thirdP} {
		for _, p := range ps {
			if q, ok := audit[p.workload]; ok {
				t.Errorf("audit: %s placed twice: %+v and %+v", p.workload, q, p)
			}
			audit[p.workload] = p
		}
	}
	stored := rs.workloads(third)
	if len(stored) != len(ids) || len(audit) != len(ids) {
		t.Errorf("store holds %d workloads, audit %d placements; want %d each", len(stored), len(audit), len(ids))
	}
	for _, w := range stored {
		p, ok := audit[w.ID]
		if !ok || p.machine != w.Machine || p.attempt != int(w.Attempt) || w.Attempt != 1 || w.State != "running" {
			t.Errorf("store: %+v; audit: %+v (found %v); want one admit, attempt 1, running on the audited machine", w, p, ok)
		}
	}
}

// Polls held 90 s (--poll-timeout 90s) by three replicas, machines spread
// over them, and the leader reading presence from the store: no machine
// goes offline on the leader for a poll held longer than the offline
// window (--offline-after 10s here, 45 s by default), through a whole
// poll and the next.
func TestLongPollsAcrossReplicasKeepMachinesOnline(t *testing.T) {
	const poll, offlineAfter = 90 * time.Second, 10 * time.Second
	rs := startReplicas(t, 3, "--poll-timeout", poll.String(), "--offline-after", offlineAfter.String())
	leader := rs.reps[0]
	rs.must(leader, "tenant", "create", "acme")
	for _, r := range rs.reps {
		rs.enrol(r)
	}
	var ids []string
	for i := range 3 {
		ids = append(ids, rs.create(leader, fmt.Sprintf("w%d", i)))
	}
	for _, id := range ids {
		rs.must(leader, "workload", "wait", id, "--state", "running", "--timeout", "60s")
	}
	start := time.Now()
	samples := 0
	// The oldest last sync the leader showed: how close a machine came to
	// the rule.
	var oldest time.Duration
	for time.Since(start) < poll+5*time.Second {
		ms := rs.machines(leader)
		if len(ms) != 3 {
			t.Fatalf("leader lists %d machines, want 3", len(ms))
		}
		for _, m := range ms {
			if m.LastSync != nil {
				oldest = max(oldest, time.Since(*m.LastSync))
			}
			if !m.Online {
				t.Fatalf("machine %s offline on the leader %s into polls of %s (last sync %v)\n%s",
					m.ID, time.Since(start).Round(time.Second), poll, m.LastSync, rs.logs())
			}
		}
		samples++
		time.Sleep(time.Second)
	}
	t.Logf("%d samples of the leader's machines over %s: all online; the oldest last sync shown was %s old, of %s",
		samples, time.Since(start).Round(time.Second), oldest.Round(10*time.Millisecond), offlineAfter)
	for _, w := range rs.workloads(leader) {
		if w.State != "running" || w.Attempt != 1 {
			t.Errorf("%+v, want running attempt 1", w)
		}
	}
	// Each replica held polls: the machines were spread, not all on one.
	for _, r := range rs.reps {
		if strings.Contains(r.p.logs.String(), "cannot write this replica's presence batch") {
			t.Errorf("replica %s lost its store:\n%s", r.name, r.p.logs)
		}
	}
}

// The offline spans are checked at start: presence batches go every third
// of --offline-after, to the second.
func TestServeRefusesTooShortOfflineAfter(t *testing.T) {
	for _, args := range [][]string{{"--offline-after", "4s"}, {"--offline-fail-after", "-1s"}} {
		cmd := exec.Command(bin("einsora-hub"), append([]string{"serve", "--data", filepath.Join(t.TempDir(), "data"),
			"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("%v: got %v, want exit 1\n%s", args, err, out)
		}
		if msg := strings.TrimSpace(string(out)); !strings.Contains(msg, args[0]) || strings.Contains(msg, "\n") {
			t.Errorf("%v: got %q, want one line naming %s", args, msg, args[0])
		}
	}
}
