package hub

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/protocol"
)

const secretValue = "s3cr3t-hunter2-value"

// openKeyedHub opens a hub over path with the secrets key of dir, logging
// into logs.
func openKeyedHub(t *testing.T, path, dir string, clk *clock.Fake, logs io.Writer) *testHub {
	t.Helper()
	key, err := LoadOrCreateSecretKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h, err := New(context.Background(), Config{Store: st, Clock: clk, SecretKey: key, AllowSim: true,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	return &testHub{Hub: h, t: t, clk: clk, path: path, st: st}
}

func fullSpec() protocol.WorkloadSpec {
	return protocol.WorkloadSpec{Command: []string{"serve", "--port", "80"}, Env: map[string]string{"GREETING": "hello"},
		SecretEnv: map[string]string{"TOKEN": secretValue}, Ports: []protocol.Port{{Host: 8080, Container: 80, Proto: "tcp"}},
		Workdir: "/srv", Volumes: []protocol.Volume{{Name: "data", Path: "/data"}},
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, Max: 3}}
}

func TestSpecReachesDesiredStateWithSecretsSealedAtRest(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	h := openKeyedHub(t, filepath.Join(dir, "hub.db"), dir, clock.NewFake(epoch), &logs)
	h.machine("m-1")
	w, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: "web", Kind: protocol.KindContainer,
		Class: "cpu-1", Region: "local", Image: "sim:", Spec: fullSpec()})
	if err != nil {
		t.Fatal(err)
	}
	h.pass()
	resp := h.desired("m-1")
	if len(resp.Workloads) != 1 || !reflect.DeepEqual(resp.Workloads[0].WorkloadSpec, fullSpec()) {
		t.Fatalf("desired spec: got %+v, want %+v", resp.Workloads, fullSpec())
	}
	// At rest: the store's record and the database file hold no secret.
	stored := h.workload(w.ID)
	if v := stored.Spec.SecretEnv["TOKEN"]; v == secretValue || !strings.HasPrefix(v, sealedPrefix) {
		t.Errorf("stored secret %q is not sealed", v)
	}
	h.st.Close()
	for _, f := range []string{"hub.db", "hub.db-wal"} {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		if bytes.Contains(b, []byte(secretValue)) {
			t.Errorf("%s holds the secret in clear", f)
		}
	}
	// A restarted hub with the same key opens it; one with another key
	// parks the workload rather than run it without its secret.
	h2 := openKeyedHub(t, filepath.Join(dir, "hub.db"), dir, clock.NewFake(epoch), &logs)
	if got := h2.desired("m-1").Workloads[0]; got.SecretEnv["TOKEN"] != secretValue || got.Mode != protocol.ModeRun {
		t.Errorf("after restart: %+v", got)
	}
	other := t.TempDir()
	h3 := openKeyedHub(t, filepath.Join(dir, "hub.db"), other, clock.NewFake(epoch), &logs)
	if got := h3.desired("m-1").Workloads[0]; got.SecretEnv != nil || got.Mode != protocol.ModePark {
		t.Errorf("with another key: got mode %s, secrets %v; want park and none", got.Mode, got.SecretEnv)
	}
	tl, _ := h2.Timeline(context.Background(), w.ID)
	for _, e := range tl {
		if strings.Contains(e.Text, secretValue) {
			t.Errorf("timeline holds the secret: %s", e.Text)
		}
	}
	if strings.Contains(logs.String(), secretValue) {
		t.Errorf("logs hold the secret")
	}
}

func TestSecretKeyFileIsPrivateAndStable(t *testing.T) {
	dir := t.TempDir()
	k1, err := LoadOrCreateSecretKey(dir)
	if err != nil || len(k1) != 32 {
		t.Fatalf("%x, %v", k1, err)
	}
	st, _ := os.Stat(filepath.Join(dir, SecretKeyFile))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	k2, _ := LoadOrCreateSecretKey(dir)
	if !bytes.Equal(k1, k2) {
		t.Error("key changed on second load")
	}
	os.WriteFile(filepath.Join(dir, SecretKeyFile), []byte("short\n"), 0o600)
	if _, err := LoadOrCreateSecretKey(dir); err == nil {
		t.Error("a damaged key was accepted")
	}
}

func TestBadSpecRefusedBeforeAnythingIsStored(t *testing.T) {
	dir := t.TempDir()
	h := openKeyedHub(t, filepath.Join(dir, "hub.db"), dir, clock.NewFake(epoch), io.Discard)
	h.machine("m-1")
	for field, spec := range map[string]protocol.WorkloadSpec{
		"ports[0].host": {Ports: []protocol.Port{{Host: 0, Container: 80}}},
		"env":           {Env: map[string]string{"BAD KEY": "x"}},
		"secret_env":    {SecretEnv: map[string]string{"EINSORA_DATA": secretValue}},
		"workdir":       {Workdir: "relative"},
		"volumes[0]":    {Volumes: []protocol.Volume{{Name: "../x", Path: "/d"}}},
		"restart":       {Restart: &protocol.RestartPolicy{Policy: "sometimes"}},
		"command":       {Command: []string{strings.Repeat("x", protocol.MaxWordBytes+1)}},
	} {
		_, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: "bad", Kind: protocol.KindContainer,
			Class: "cpu-1", Region: "local", Image: "sim:", Spec: spec})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), field) || strings.Contains(err.Error(), secretValue) {
			t.Errorf("%s: got %v", field, err)
		}
	}
	ws, _ := h.Workloads(context.Background())
	if len(ws) != 0 {
		t.Errorf("%d workloads stored", len(ws))
	}
	// A hub without a key refuses secrets rather than store them in clear.
	bare := newTestHub(t)
	bare.machine("m-1")
	_, err := bare.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: "s", Kind: protocol.KindContainer,
		Class: "cpu-1", Region: "local", Spec: protocol.WorkloadSpec{SecretEnv: map[string]string{"A": "b"}}})
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("secret on a hub without a key: %v", err)
	}
	if ws, _ := bare.Workloads(context.Background()); len(ws) != 0 {
		t.Errorf("%d workloads stored", len(ws))
	}
	_ = store.StatePending
}

func TestPortsTakenAndOldAgentsQueueWithAReason(t *testing.T) {
	dir := t.TempDir()
	h := openKeyedHub(t, filepath.Join(dir, "hub.db"), dir, clock.NewFake(epoch), io.Discard)
	h.machine("m-1")
	create := func(name string, spec protocol.WorkloadSpec) store.Workload {
		w, err := h.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: name, Kind: protocol.KindContainer,
			Class: "cpu-1", Region: "local", Image: "sim:", Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	port := protocol.WorkloadSpec{Ports: []protocol.Port{{Host: 8080, Container: 80}}}
	a := create("a", port)
	h.pass()
	b := create("b", port)
	h.pass()
	wantState(t, h, a.ID, store.StateProvisioning)
	if got := wantState(t, h, b.ID, store.StateQueued); got.Reason != "no machine of tenant local in region local has host port 8080/tcp free" {
		t.Errorf("reason: %q", got.Reason)
	}
	// Parked, a frees its port and b is placed.
	if err := h.ParkWorkload(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	resp := h.desired("m-1")
	h.report("m-1", resp, protocol.Status{Workload: a.ID, Attempt: 1, Mode: protocol.ModePark, Code: protocol.CodeStopped})
	h.pass()
	wantState(t, h, a.ID, store.StateStopped)
	wantState(t, h, b.ID, store.StateProvisioning)

	// An agent that does not report the spec feature gets no workload
	// with a spec, and the reason says why; one without a spec it runs.
	dir2 := t.TempDir()
	h2 := openKeyedHub(t, filepath.Join(dir2, "hub.db"), dir2, clock.NewFake(epoch), io.Discard)
	if err := h2.EnsureTenant(context.Background(), "local"); err != nil {
		t.Fatal(err)
	}
	if err := h2.RegisterMachine(context.Background(), "m-old", "m-old", "local", "local"); err != nil {
		t.Fatal(err)
	}
	inv := testInventory()
	inv.Features = nil
	h2.sync("m-old", &protocol.SyncRequest{ProtocolVersion: protocol.Version, Inventory: inv})
	withSpec, err := h2.CreateWorkload(context.Background(), WorkloadSpec{Tenant: "local", Name: "s", Kind: protocol.KindContainer,
		Class: "cpu-1", Region: "local", Image: "sim:", Spec: protocol.WorkloadSpec{Env: map[string]string{"A": "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	bare := h2.create("bare", protocol.KindContainer)
	h2.pass()
	if got := wantState(t, h2, withSpec.ID, store.StateQueued); !strings.Contains(got.Reason, "runs an agent new enough for it (it needs agent features spec") {
		t.Errorf("reason: %q", got.Reason)
	}
	wantState(t, h2, bare.ID, store.StateProvisioning)
}
