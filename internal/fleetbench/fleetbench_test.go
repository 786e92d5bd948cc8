package fleetbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/internal/pgtest"
	"einsora.dev/edge/internal/testnet"
)

// Every agent has its own loopback source address.
func TestSourceAddrsDistinctAndLoopback(t *testing.T) {
	seen := map[string]bool{}
	for i := range maxN {
		ip := sourceAddr(i)
		if !ip.IsLoopback() || seen[ip.String()] {
			t.Fatalf("agent %d: %s is not loopback or not its own", i, ip)
		}
		seen[ip.String()] = true
	}
}

// The counting dialer refuses anything but loopback.
func TestDialerLoopbackOnly(t *testing.T) {
	var m meter
	_, err := m.dialer(0)(context.Background(), "tcp", "192.0.2.1:443")
	if err == nil || !strings.Contains(err.Error(), "loopback only") {
		t.Fatalf("got %v, want a refusal", err)
	}
	if m.dials.Load() != 0 {
		t.Errorf("a refused dial was counted")
	}
}

// The agents' keepalive idle times spread over at least seven of the
// kernel's 16 s timer slots, around the agent's own, so that the probes
// of agents that connected together do not all fire together.
func TestAgentsKeepAliveIdleSpreadAroundTheAgentsOwn(t *testing.T) {
	const agents = 121
	lo, hi, sum := time.Duration(1<<62), time.Duration(0), time.Duration(0)
	for i := range agents {
		d := keepAliveIdle(i)
		lo, hi, sum = min(lo, d), max(hi, d), sum+d
	}
	if hi-lo < 7*16384*time.Millisecond {
		t.Errorf("idle times span %s to %s: fewer than seven 16 s slots", lo, hi)
	}
	if mean := sum / agents; mean != hubclient.KeepAliveIdle {
		t.Errorf("mean idle %s, want the agent's own %s", mean, hubclient.KeepAliveIdle)
	}
}

// The counting dialer counts dials and bytes both ways.
func TestMeterCounts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 5)
		c.Read(b)
		c.Write([]byte("hi"))
	}()
	var m meter
	c, err := m.dialer(3)(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.LocalAddr().(*net.TCPAddr).IP; !got.Equal(sourceAddr(3)) {
		t.Errorf("dialled from %s, want %s", got, sourceAddr(3))
	}
	if got, err := testnet.KeepAliveIdle(c.(*countedConn).Conn); err != nil || got != keepAliveIdle(3) {
		t.Errorf("keepalive idle %s (%v), want agent 3's %s", got, err, keepAliveIdle(3))
	}
	c.Write([]byte("hello"))
	b := make([]byte, 2)
	c.Read(b)
	if m.dials.Load() != 1 || m.bytes.Load() != 7 {
		t.Errorf("%d dials, %d bytes; want 1 and 7", m.dials.Load(), m.bytes.Load())
	}
}

// This process's CPU time grows with work, and its RSS is read.
func TestProcReadings(t *testing.T) {
	pid := os.Getpid()
	a, err := cpuTime(pid)
	if err != nil {
		t.Skip("no /proc here:", err)
	}
	end := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(end); x++ {
		_ = x * x
	}
	b, err := cpuTime(pid)
	if err != nil || b <= a {
		t.Errorf("CPU time %s then %s (%v), want it to grow", a, b, err)
	}
	if kb, err := rssKiB(pid); err != nil || kb <= 0 {
		t.Errorf("RSS %d KiB, %v", kb, err)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(101-i))
	}
	if p50, p99 := percentile(ds, 50), percentile(ds, 99); p50 != 50 || p99 != 99 {
		t.Errorf("p50 %d, p99 %d; want 50 and 99", p50, p99)
	}
	if percentile(nil, 99) != 0 {
		t.Error("no samples: want 0")
	}
}

// Paced changes start on their schedule, never before it, and a run
// stopped meanwhile stops waiting.
func TestPacedChangesWaitTheirTurn(t *testing.T) {
	const every = 20 * time.Millisecond
	phase := time.Now()
	for k := range 4 {
		if err := waitTurn(context.Background(), phase, k, every); err != nil {
			t.Fatal(err)
		}
		if since := time.Since(phase); since < time.Duration(k)*every {
			t.Errorf("change %d began %s into the phase, before its turn at %s", k, since, time.Duration(k)*every)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := waitTurn(ctx, time.Now(), 1, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("a stopped run waiting its turn: %v, want %v", err, context.Canceled)
	}
	// A schedule past an hour is refused before anything starts, however
	// large the pace (no overflow lets it through).
	for _, bad := range []time.Duration{-time.Second, time.Minute, 1 << 62} {
		err := Run(context.Background(), Config{N: 1000, Changes: 100, ChangeEvery: bad, Dir: t.TempDir(), Out: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "-change-every") {
			t.Errorf("-change-every %s with 100 changes: %v, want it refused", bad, err)
		}
	}
	if pacing(0) != "back to back" || pacing(every) != "every 20ms" {
		t.Errorf("pacing says %q and %q", pacing(0), pacing(every))
	}
}

// The bench and the server are separate processes, each with its own
// open-file limit: N agents need about N descriptors in each, so 10,000
// agents fit this container's limit of 20,000, with the server's headroom.
func TestOpenFilesCountedPerProcess(t *testing.T) {
	const containerLimit = 20000
	if need := openFilesNeeded(10000); need > containerLimit || need < 10000+fdHeadroom {
		t.Errorf("N=10000 needs %d open files per process; want N plus headroom, within %d", need, containerLimit)
	}
	if need := openFilesNeeded(19600); need <= containerLimit {
		t.Errorf("N=19600 needs %d open files per process, which leaves no headroom under %d", need, containerLimit)
	}
}

// Among replicas, park and run go to another replica than the agent's on
// every other cycle and to the agent's own on the others, and creates go
// to each replica in turn; with one process everything is local.
func TestViaForCrossesAndStays(t *testing.T) {
	cross, same := 0, 0
	for k := range 60 {
		via := viaFor(k, 1, 3)
		if via < 0 || via >= 3 {
			t.Fatalf("change %d via replica %d of 3", k, via)
		}
		switch {
		case k%3 == 0:
			if via != (k/3)%3 {
				t.Errorf("create %d via %d, want %d", k, via, (k/3)%3)
			}
		case via == 1:
			same++
		default:
			cross++
		}
		if viaFor(k, 0, 1) != 0 {
			t.Errorf("change %d of one process not made on it", k)
		}
	}
	if cross != 20 || same != 20 {
		t.Errorf("parks and runs: %d across replicas, %d on the agent's; want 20 and 20", cross, same)
	}
}

// longPolls reads the held polls from the hub's counters, with the admin
// token, and says when they cannot be read.
func TestLongPollsReadsTheCounters(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/counters" || r.Header.Get("Authorization") != "Bearer tok" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		io.WriteString(w, `{"dropped_statuses":3,"long_polls":1234}`)
	}))
	defer srv.Close()
	api := &adminapi.Client{BaseURL: srv.URL, Token: "tok"}
	n, err := longPolls(context.Background(), api)
	if err != nil || n != 1234 {
		t.Fatalf("got %d, %v; want 1234", n, err)
	}
	status = http.StatusServiceUnavailable
	if n, err := longPolls(context.Background(), api); err == nil {
		t.Errorf("a failing hub: got %d, want an error", n)
	}
}

// A replica's copy of the data directory keeps the files' modes: the
// keys and the admin token stay 0600.
func TestCopyDirKeepsModes(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(filepath.Join(src, "ca.key"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "ca.crt"), []byte("c"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := copyDir(src, dst); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"ca.key": 0o600, "ca.crt": 0o644} {
		st, err := os.Stat(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, st.Mode().Perm(), want)
		}
	}
}

// The table has a column per target and the first's ratio to each other;
// a figure a target does not have is a dash, and so is its ratio.
func TestPrintTableColumnsAndRatios(t *testing.T) {
	reps := result{replicas: 3, cpuPerChange: 30 * time.Millisecond, crossP99: 40 * time.Millisecond, nCross: 5,
		sameP99: 20 * time.Millisecond, nSame: 5, enrolPerSec: 100}
	one := result{replicas: 1, cpuPerChange: 10 * time.Millisecond, wakeP99: 20 * time.Millisecond, enrolPerSec: 200}
	base := result{replicas: 1, cpuPerChange: 1 * time.Millisecond, wakeP99: 1 * time.Millisecond}
	var b strings.Builder
	printTable(&b, 9, []column{{"replicas", reps}, {"one", one}, {"stock", base}})
	out := b.String()
	for _, want := range []string{
		"| measure, N=9 | replicas | one | stock | ratio to one | ratio to stock |",
		"| hub CPU per single-workload change (create, park, run) | 30.000 ms | 10.000 ms | 1.000 ms | 3.0× | 30.0× |",
		"| wake across replicas (change on another replica; one process: every change), p99 | 40.000 ms (5) | 20.000 ms | 1.000 ms | 2.0× | 40.0× |",
		"| wake on the replica holding the poll, p99 | 20.000 ms (5) | — | — | — | — |",
		"| enrolments per second | 100 | 200 | — | 0.5× | — |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printTable(&b, 9, []column{{"hub", one}, {"stock", base}})
	if out := b.String(); strings.Contains(out, "across replicas") || !strings.Contains(out, "| measure, N=9 | hub | stock | ratio |") {
		t.Errorf("one hub and the baseline: want the two-column table without replica rows:\n%s", out)
	}
}

// The throwaway PostgreSQL starts, and each schema the bench makes is a
// database of its own to the hub: a table made in one is not in another.
func TestThrowawayPostgresSchemas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	dsn, stop, err := startPostgres()
	if errors.Is(err, pgtest.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	a, err := pgSchema(ctx, dsn, "fleetbench_test_a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := pgSchema(ctx, dsn, "fleetbench_test_b")
	if err != nil {
		t.Fatal(err)
	}
	if err := pgExec(ctx, a, "CREATE TABLE machines (id text)"); err != nil {
		t.Fatal(err)
	}
	if err := pgExec(ctx, b, "SELECT * FROM machines"); err == nil {
		t.Error("schema b sees schema a's table")
	}
	if err := pgExec(ctx, a, "SELECT * FROM machines"); err != nil {
		t.Errorf("schema a: %v", err)
	}
	if _, err := pgSchema(ctx, dsn, "x; DROP SCHEMA public"); err == nil {
		t.Error("a schema name with SQL in it was accepted")
	}
	if err := dropPGSchema(dsn, "fleetbench_test_a"); err != nil {
		t.Error(err)
	}
}

// Replicas start on copies of the first one's data directory, each with
// --url the address it listens on, and all on the one store.
func TestReplicasStartOnCopiesWithTheirOwnURL(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	// A stand-in for einsora-hub serve: it records its arguments, makes
	// an admin token once per data directory, says where it listens.
	bin := filepath.Join(dir, "hub.sh")
	script := `#!/bin/sh
echo "$@" >> "` + argsFile + `"
while [ $# -gt 0 ]; do case $1 in --data) data=$2; shift;; --listen) listen=$2; shift;; esac; shift; done
mkdir -p "$data"; [ -f "$data/admin-token" ] || echo "tok-$$" > "$data/admin-token"
echo "einsora-hub serve: admin API on http://127.0.0.1:9, agents connect to https://$listen, data in $data"
exec sleep 60
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHubTarget(bin, filepath.Join(dir, "hub"), "postgres://db/x", 3, nil, 0)
	if err := h.start(); err != nil {
		t.Fatal(err)
	}
	defer h.stop()
	b, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d replicas started, want 3:\n%s", len(lines), b)
	}
	for i, l := range lines {
		r := h.reps[i]
		if strings.HasSuffix(r.listen, ":0") || !strings.Contains(l, "--listen "+r.listen+" ") || !strings.Contains(l, "--url https://"+r.listen) {
			t.Errorf("replica %d: %s; want --listen on a port and --url of it", i, l)
		}
		if !strings.Contains(l, "--store postgres://db/x") {
			t.Errorf("replica %d: %s; want the store", i, l)
		}
		if r.api.Token != h.reps[0].api.Token {
			t.Errorf("replica %d: admin token %q, the first's %q: not a copy", i, r.api.Token, h.reps[0].api.Token)
		}
	}
	if us := h.urls(); len(us) != 3 || us[0] == us[1] || us[1] == us[2] {
		t.Errorf("urls %v: want three of their own", us)
	}
}

// A restart is done when all but one in a thousand machines are back:
// every one below 1,000 agents, ten at 10,000.
func TestRestartSlack(t *testing.T) {
	for n, want := range map[int]int{1: 0, 999: 0, 1000: 1, 10000: 10, 60000: 60} {
		if got := restartSlack(n); got != want {
			t.Errorf("restartSlack(%d) = %d, want %d", n, got, want)
		}
	}
}

// The failed syncs of a phase are told by kind, most frequent first, in a
// bounded tally that starts again when taken.
func TestCausesTallyFailedSyncsByKind(t *testing.T) {
	var c causes
	for range 3 {
		c.add(&hubclient.HubError{Code: http.StatusServiceUnavailable, Message: "the hub is busy"})
	}
	c.add(fmt.Errorf("sync: %w", io.ErrUnexpectedEOF))
	c.add(fmt.Errorf("sync: %w", &hubclient.TLSRefusedError{Alert: "bad certificate"}))
	for range 2 {
		c.add(fmt.Errorf("sync: %w", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}))
	}
	c.add(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	want := "HTTP 503 3, network (read: connection reset by peer) 2, TLS refused (bad certificate) 1, connection closed 1, network (dial: connection refused) 1"
	if got := c.take(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := c.take(); got != "none" {
		t.Errorf("after take: got %q, want none", got)
	}
	for code := range maxCauses + 5 {
		c.add(&hubclient.HubError{Code: 400 + code})
	}
	if got := c.take(); strings.Count(got, ",")+1 != maxCauses+1 || !strings.HasPrefix(got, "other 5,") {
		t.Errorf("%d kinds tallied as %q, want %d kinds and the rest as other", maxCauses+5, got, maxCauses)
	}
}

// A replica that sent its agents away under load may hold none when the
// restart comes; the crash takes the one holding the most, so the restart
// measures agents coming back.
func TestRestartCrashesTheReplicaHoldingTheMostAgents(t *testing.T) {
	for _, tc := range []struct {
		counts []int
		want   int
	}{
		{[]int{10000}, 0},
		{[]int{0, 5021, 4979}, 1},
		{[]int{3000, 3000, 4000}, 2},
		{[]int{3400, 3400, 3200}, 0},
	} {
		if got := busiest(tc.counts); got != tc.want {
			t.Errorf("busiest(%v) = %d, want %d", tc.counts, got, tc.want)
		}
	}
	if got, want := joinCounts([]int{0, 5021, 4979}), "0 / 5021 / 4979"; got != want {
		t.Errorf("joinCounts = %q, want %q", got, want)
	}
}

// The live heap is read from a server's heap profile, after a collection:
// it counts what the server keeps and not what it has freed, and is sent
// the admin token where the server asks for one.
func TestLiveHeapReadFromTheHeapProfile(t *testing.T) {
	const token = "s3cret"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		pprof.Handler("heap").ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx := context.Background()
	before, err := liveHeap(ctx, srv.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	// No collection but the one asked for: the garbage is still on the
	// heap when the profile is asked for.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	kept := make([]byte, 64<<20)
	for range 4 {
		_ = make([]byte, 64<<20) // garbage at once
	}
	after, err := liveHeap(ctx, srv.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	if grew := after - before; grew < 60<<20 || grew > 100<<20 {
		t.Errorf("the live heap grew by %d MiB keeping 64 MiB and freeing 256, want about 64", grew>>20)
	}
	runtime.KeepAlive(kept)

	if _, err := liveHeap(ctx, srv.URL, "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("with the wrong token: %v, want the server's 401", err)
	}
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "heap profile: 0: 0 [0: 0] @ heap/1048576\n")
	}))
	defer bare.Close()
	if _, err := liveHeap(ctx, bare.URL, ""); err == nil || !strings.Contains(err.Error(), "no HeapAlloc") {
		t.Errorf("from a profile without statistics: %v, want it said", err)
	}
}
