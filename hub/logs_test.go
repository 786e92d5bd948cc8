package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// placed returns a hub with machine m-1 running one workload.
func placed(t *testing.T) (*testHub, store.Workload) {
	t.Helper()
	h := newTestHub(t)
	h.machine("m-1")
	w := h.create("web", protocol.KindContainer)
	h.pass()
	return h, h.workload(w.ID)
}

type logResult struct {
	lines []protocol.LogLine
	err   error
}

func readLogs(h *testHub, id string, o LogOptions) chan logResult {
	done := make(chan logResult, 1)
	go func() {
		var r logResult
		var mu sync.Mutex
		r.err = h.WorkloadLogs(context.Background(), id, o, func(l protocol.LogLine) error {
			mu.Lock()
			defer mu.Unlock()
			r.lines = append(r.lines, l)
			return nil
		})
		done <- r
	}()
	return done
}

// takeRequest syncs as m-1's agent until its answer carries a log request.
func takeRequest(t *testing.T, h *testHub) protocol.LogRequest {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		resp := h.sync("m-1", &protocol.SyncRequest{})
		if len(resp.Logs) > 0 {
			return resp.Logs[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no log request in the sync answers")
	return protocol.LogRequest{}
}

func ndjson(lines ...string) string {
	var b strings.Builder
	for i, l := range lines {
		q, _ := json.Marshal(l)
		fmt.Fprintf(&b, `{"t":"2026-11-29T10:00:0%dZ","s":"stdout","l":%s}`+"\n", i, q)
	}
	return b.String()
}

func TestLogsRelayedFromTheMachinesUpload(t *testing.T) {
	h, w := placed(t)
	got := readLogs(h, w.ID, LogOptions{Tail: 10})
	req := takeRequest(t, h)
	if req.Workload != w.ID || req.Tail != 10 || req.Token == "" {
		t.Fatalf("request %+v", req)
	}
	// Handed out once: the next answer does not repeat it.
	h.Wake("m-1")
	if resp := h.sync("m-1", &protocol.SyncRequest{}); len(resp.Logs) != 0 {
		t.Errorf("repeated: %+v", resp.Logs)
	}
	// Another machine's upload under this token is refused.
	if err := h.AcceptLogs(context.Background(), "m-2", req.Token, strings.NewReader(ndjson("x"))); !errors.Is(err, ErrUnknownLogToken) {
		t.Errorf("another machine's upload: %v", err)
	}
	if err := h.AcceptLogs(context.Background(), "m-1", req.Token, strings.NewReader(ndjson("one", "two \x1b[2J"))); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || len(r.lines) != 2 || r.lines[0].Line != "one" || r.lines[1].Line != "two \x1b[2J" || r.lines[0].Stream != "stdout" {
		t.Fatalf("got %+v", r)
	}
	// The token is spent.
	if err := h.AcceptLogs(context.Background(), "m-1", req.Token, strings.NewReader("")); !errors.Is(err, ErrUnknownLogToken) {
		t.Errorf("a second upload: %v", err)
	}
}

func TestLogsUploadClosedWhenNobodyListens(t *testing.T) {
	h, w := placed(t)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		got <- h.WorkloadLogs(ctx, w.ID, LogOptions{Follow: true}, func(protocol.LogLine) error { return nil })
	}()
	req := takeRequest(t, h)
	pr, pw := io.Pipe()
	ended := make(chan error, 1)
	go func() { ended <- h.AcceptLogs(context.Background(), "m-1", req.Token, pr) }()
	go func() {
		for {
			if _, err := io.WriteString(pw, ndjson("again")); err != nil {
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Errorf("reader: %v", err)
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("upload ended with %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upload went on with nobody listening")
	}
	pr.Close()
}

func TestLogsOfAnOfflineOrSilentMachineFailAtOnce(t *testing.T) {
	h, w := placed(t)
	// Silent: the request waits the connect timeout on the hub's clock.
	got := readLogs(h, w.ID, LogOptions{})
	takeRequest(t, h)
	waitTimers(t, h.clk, 1)
	h.clk.Advance(DefaultLogConnectTimeout)
	r := <-got
	if !errors.Is(r.err, ErrUnavailable) || !strings.Contains(r.err.Error(), "machine m-1 (m-1) did not send the output") {
		t.Errorf("silent machine: %v", r.err)
	}
	// Offline: refused before asking.
	h.clk.Advance(DefaultOfflineAfter + time.Second)
	err := h.WorkloadLogs(context.Background(), w.ID, LogOptions{}, func(protocol.LogLine) error { return nil })
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "machine m-1 (m-1), which holds workload "+w.ID+", is offline") {
		t.Errorf("offline machine: %v", err)
	}
	// Not placed: no machine to ask.
	h2 := newTestHub(t)
	h2.EnsureTenant(context.Background(), "local")
	q := h2.create("q", protocol.KindContainer)
	if err := h2.WorkloadLogs(context.Background(), q.ID, LogOptions{}, func(protocol.LogLine) error { return nil }); !errors.Is(err, ErrUnavailable) {
		t.Errorf("unplaced: %v", err)
	}
}

func TestLogRequestsAreBoundedPerMachine(t *testing.T) {
	h, w := placed(t)
	var wants []*logWant
	for range MaxLogWantsPerMachine {
		lw, err := h.logs.register("m-1", "local", protocol.LogRequest{Workload: w.ID})
		if err != nil {
			t.Fatal(err)
		}
		wants = append(wants, lw)
	}
	err := h.WorkloadLogs(context.Background(), w.ID, LogOptions{}, func(protocol.LogLine) error { return nil })
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "already streams") {
		t.Errorf("over the bound: %v", err)
	}
	if got := h.logs.take("m-1"); len(got) != MaxLogWantsPerMachine {
		t.Errorf("took %d", len(got))
	}
	for _, lw := range wants {
		h.logs.unregister(lw)
	}
	if len(h.logs.wants) != 0 || len(h.logs.perMachine) != 0 || len(h.logs.perTenant) != 0 {
		t.Errorf("left %d wants, %v, %v", len(h.logs.wants), h.logs.perMachine, h.logs.perTenant)
	}
	// Per tenant, across its machines.
	for i := range MaxLogWantsPerTenant {
		lw, err := h.logs.register(fmt.Sprintf("m-%d", i), "local", protocol.LogRequest{Workload: w.ID})
		if err != nil {
			t.Fatal(err)
		}
		defer h.logs.unregister(lw)
	}
	if _, err := h.logs.register("m-other", "local", protocol.LogRequest{Workload: w.ID}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "tenant local") {
		t.Errorf("over the tenant's bound: %v", err)
	}
	if lw, err := h.logs.register("m-other", "acme", protocol.LogRequest{Workload: w.ID}); err != nil {
		t.Errorf("another tenant: %v", err)
	} else {
		h.logs.unregister(lw)
	}
}

func TestLogUploadRejectsBadLines(t *testing.T) {
	h, w := placed(t)
	for name, body := range map[string]string{
		"not_json":      "hello\n",
		"unknown_field": `{"t":"2026-11-29T10:00:00Z","s":"stdout","l":"x","extra":1}` + "\n",
		"too_long":      `{"l":"` + strings.Repeat("a", protocol.MaxLogLineBytes) + `"}` + "\n",
	} {
		got := readLogs(h, w.ID, LogOptions{})
		req := takeRequest(t, h)
		if err := h.AcceptLogs(context.Background(), "m-1", req.Token, strings.NewReader(body)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v", name, err)
		}
		<-got
	}
}

func TestLogBucketLimitsBytesPerSecond(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := newBucket(clk, 1000, 1000)
	if d := b.take(1000); d != 0 {
		t.Errorf("within the burst: wait %s", d)
	}
	if d := b.take(500); d != 500*time.Millisecond {
		t.Errorf("over it: wait %s, want 500ms", d)
	}
	clk.Advance(2 * time.Second)
	if d := b.take(1000); d != 0 {
		t.Errorf("after refilling: wait %s", d)
	}
}
