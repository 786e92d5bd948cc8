package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/sim"
	"einsora.dev/edge/protocol"
)

func verdicts(t *testing.T, checks []Check) map[string]Verdict {
	t.Helper()
	m := map[string]Verdict{}
	for _, c := range checks {
		m[c.Name] = c.Verdict
		if c.Verdict != OK && c.Fix == "" {
			t.Errorf("check %s is %s with no fix", c.Name, c.Verdict)
		}
	}
	return m
}

func TestDoctor(t *testing.T) {
	inv := func(context.Context) protocol.Inventory {
		return protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 2, MemoryMB: 1024}
	}
	t.Run("missing_state_dir_fails", func(t *testing.T) {
		checks := Doctor(context.Background(), DoctorConfig{StateDir: filepath.Join(t.TempDir(), "nope"), Inventory: inv})
		if got := verdicts(t, checks)["state directory"]; got != Fail || !Failed(checks) {
			t.Errorf("got %s, want fail", got)
		}
	})
	t.Run("running_agent_is_ok", func(t *testing.T) {
		dir := t.TempDir()
		os.Chmod(dir, 0o700)
		f := newFakeHub()
		startAgent(t, dir, f)
		d, _ := sim.New(filepath.Join(dir, "sim"), clock.Real{})
		checks := Doctor(context.Background(), DoctorConfig{StateDir: dir, Drivers: drivers.NewHost(d), Inventory: inv})
		v := verdicts(t, checks)
		for _, name := range []string{"state directory", "machine id", "agent running", "inventory"} {
			if v[name] != OK {
				t.Errorf("%s: got %s, want ok (%+v)", name, v[name], checks)
			}
		}
		if v["driver sim"] != Warn || Failed(checks) {
			t.Errorf("sim: got %s, want a warning that it runs nothing and no failure (%+v)", v["driver sim"], checks)
		}
	})
	t.Run("no_runtime_fails_with_the_fix", func(t *testing.T) {
		t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
		dir := t.TempDir()
		host, closeAll, err := BuildDrivers(context.Background(), "auto", dir, "m-1", clock.Real{}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll()
		checks := Doctor(context.Background(), DoctorConfig{StateDir: dir, Drivers: host})
		if verdicts(t, checks)["drivers"] != Fail || !Failed(checks) {
			t.Fatalf("no runtime answering: got %+v, want the drivers check to fail", checks)
		}
		for _, c := range checks {
			if c.Name == "drivers" && !strings.Contains(c.Fix, "start Docker") {
				t.Errorf("fix %q does not say to start Docker", c.Fix)
			}
		}
	})
	t.Run("stopped_agent_warns", func(t *testing.T) {
		dir := t.TempDir()
		os.Chmod(dir, 0o700)
		v := verdicts(t, Doctor(context.Background(), DoctorConfig{StateDir: dir}))
		if v["agent running"] != Warn || v["machine id"] != Warn {
			t.Errorf("got %v", v)
		}
	})
	t.Run("empty_inventory_fails", func(t *testing.T) {
		checks := Doctor(context.Background(), DoctorConfig{StateDir: t.TempDir(),
			Inventory: func(context.Context) protocol.Inventory { return protocol.Inventory{Notes: []string{"no /proc"}} }})
		if verdicts(t, checks)["inventory"] != Fail {
			t.Error("an inventory without CPUs passed")
		}
	})
}
