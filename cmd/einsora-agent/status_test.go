package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/sim"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// `einsora-agent status` shows each workload's state and its last driver
// error, read from a running agent's state directory.
func TestStatusShowsStateAndLastDriverError(t *testing.T) {
	dir := t.TempDir()
	d, err := sim.New(filepath.Join(dir, "sim"), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	desired := &protocol.SyncResponse{StoreID: "st-1", Generation: 1, Workloads: []protocol.DesiredWorkload{
		{ID: "w-bad", Attempt: 1, Mode: protocol.ModeRun, Kind: protocol.KindContainer, Driver: "sim", Image: "sim:color=blue"},
		{ID: "w-good", Attempt: 1, Mode: protocol.ModeRun, Kind: protocol.KindContainer, Driver: "sim", Image: "sim"},
	}, Hubs: []string{"https://b.example:8443"}}
	tr := hubclient.Func(func(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
		if req.Generation == 1 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
			return &protocol.SyncResponse{StoreID: "st-1", Generation: 1, Unchanged: true}, nil
		}
		return desired, nil
	})
	a, err := agent.Open(agent.Config{StateDir: dir, Drivers: drivers.NewHost(d), Transport: tr,
		Logger: slog.New(slog.DiscardHandler), ApplyInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	defer func() { cancel(); <-done; a.Close() }()

	status := func(args ...string) string {
		var out bytes.Buffer
		root := newRoot()
		root.SetOut(&out)
		root.SetArgs(append([]string{"status", "--state-dir", dir}, args...))
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	deadline := time.Now().Add(10 * time.Second)
	var st agent.Status
	for {
		if err := json.Unmarshal([]byte(status("--json")), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Workloads) == 2 && st.Workloads[0].LastError != nil && st.Workloads[1].State == protocol.CodeRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status --json never showed both workloads: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if w := st.Workloads[0]; w.ID != "w-bad" || w.State != protocol.CodeFailedStart || !strings.Contains(w.LastError.Error, "unknown option") {
		t.Errorf("w-bad: %+v", w)
	}
	if st.Workloads[1].LastError != nil {
		t.Errorf("w-good has an error: %+v", st.Workloads[1].LastError)
	}
	if len(st.Hubs) != 1 || st.Hubs[0] != "https://b.example:8443" {
		t.Errorf("hubs: got %v, want the replica the hub told of", st.Hubs)
	}
	text := status()
	for _, want := range []string{"replicas:   https://b.example:8443", "w-bad", "failed_start", "last error:", "start via sim", "unknown option", "w-good", "running"} {
		if !strings.Contains(text, want) {
			t.Errorf("status does not show %q:\n%s", want, text)
		}
	}
}

func TestStatusSaysRevoked(t *testing.T) {
	var out bytes.Buffer
	printStatus(&out, agent.Status{MachineID: "m-1", Revoked: &agent.Revocation{At: time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC), Message: "enrol again"}})
	if !strings.Contains(out.String(), "REVOKED:    at 2026-12-01T03:00:00Z: enrol again") {
		t.Errorf("status of a revoked machine:\n%s", out.String())
	}
}
