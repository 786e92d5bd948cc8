package vz

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/protocol"
)

// ipsw writes a fake IPSW.
func ipsw(t *testing.T, dir, name, opts string) string {
	t.Helper()
	p := filepath.Join(dir, name+".ipsw")
	if err := os.WriteFile(p, []byte("fake: "+opts+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Two macOS guests run; a third is refused with the retryable vz_vm_limit
// while Linux guests do not count; once one stops, it runs.
func TestTwoMacOSGuestLimit(t *testing.T) {
	dir, imgs := t.TempDir(), t.TempDir()
	d := newTestDriver(t, Options{Dir: dir})
	mac := ipsw(t, imgs, "mac", "run")
	linux := image(t, imgs, "linux.raw", "run")
	for _, w := range []string{"linux1", "linux2"} {
		if err := d.Start(ctxT(t), spec(w, linux, 1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []string{"mac1", "mac2"} {
		if err := d.Start(ctxT(t), spec(w, mac, 1)); err != nil {
			t.Fatal(err)
		}
		waitState(t, d, w, drivers.StateRunning)
	}
	if free, why := d.MacOSCapacity(); free != 0 || why != "" {
		t.Fatalf("capacity %d %q with two macOS guests, want 0", free, why)
	}
	if err := d.Start(ctxT(t), spec("mac3", mac, 1)); err != nil {
		t.Fatal(err)
	}
	in := waitState(t, d, "mac3", drivers.StateFailed)
	if in.Code != protocol.CodeFailedStart || !strings.HasPrefix(in.Detail, string(ReasonVMLimit)) {
		t.Fatalf("third macOS guest: %+v, want %s", in, ReasonVMLimit)
	}
	if err := d.Stop(ctxT(t), "mac1"); err != nil {
		t.Fatal(err)
	}
	if free, _ := d.MacOSCapacity(); free != 1 {
		t.Fatalf("capacity %d after a stop, want 1", free)
	}
	if err := d.Start(ctxT(t), spec("mac3", mac, 2)); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, "mac3", drivers.StateRunning)
}

// The OS refuses a macOS guest while fewer than two run (its count
// sticks): vz_vm_limit, and no macOS capacity is offered until the backoff
// passes.
func TestOSRefusalWithdrawsCapacity(t *testing.T) {
	dir, imgs := t.TempDir(), t.TempDir()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := newTestDriver(t, Options{Dir: dir, Clock: clk, LimitBackoff: time.Minute})
	if err := d.Start(ctxT(t), spec("stuck", ipsw(t, imgs, "refused", "limit"), 1)); err != nil {
		t.Fatal(err)
	}
	in := waitState(t, d, "stuck", drivers.StateFailed)
	if !strings.HasPrefix(in.Detail, string(ReasonVMLimit)) {
		t.Fatalf("got %+v, want %s", in, ReasonVMLimit)
	}
	free, why := d.MacOSCapacity()
	if free != 0 || !strings.Contains(why, "refused") {
		t.Fatalf("capacity %d %q after the OS refused, want 0 and why", free, why)
	}
	ok := ipsw(t, imgs, "fine", "run")
	if err := d.Start(ctxT(t), spec("other", ok, 1)); err != nil {
		t.Fatal(err)
	}
	if in := waitState(t, d, "other", drivers.StateFailed); !strings.HasPrefix(in.Detail, string(ReasonVMLimit)) {
		t.Fatalf("start while withdrawn: %+v", in)
	}
	clk.Advance(time.Minute)
	if free, why := d.MacOSCapacity(); free != 2 || why != "" {
		t.Fatalf("capacity %d %q after the backoff, want 2", free, why)
	}
}

// Restoring macOS shows as starting with the install's percentage; then
// the guest runs, and the bundle keeps its install.
func TestMacOSInstallProgress(t *testing.T) {
	dir, imgs := t.TempDir(), t.TempDir()
	d := newTestDriver(t, Options{Dir: dir})
	if err := d.Start(ctxT(t), spec("m", ipsw(t, imgs, "slow", "install-step=150ms"), 1)); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		list, _ := d.List(ctxT(t))
		if len(list) == 1 {
			if list[0].State == drivers.StateRunning {
				break
			}
			seen[list[0].Progress] = true
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !seen["install 40%"] {
		t.Fatalf("progress seen %v, want install 40%%", seen)
	}
	b := bundleFor(d.bundles, "m")
	if _, err := os.Stat(b.Installed()); err != nil {
		t.Fatalf("install not recorded: %v", err)
	}
}

// Parking a macOS guest while it installs cancels the install and leaves
// it stopped; the next Start installs again and runs.
func TestStopDuringInstall(t *testing.T) {
	dir, imgs := t.TempDir(), t.TempDir()
	d := newTestDriver(t, Options{Dir: dir})
	img := ipsw(t, imgs, "slow", "install-step=2s")
	if err := d.Start(ctxT(t), spec("m", img, 1)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, _ := d.List(ctxT(t))
		if len(list) == 1 && strings.HasPrefix(list[0].Progress, "install") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never installing: %+v", list)
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if err := d.Stop(ctxT(t), "m"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("stop took %v: the install was not cancelled", el)
	}
	waitState(t, d, "m", drivers.StateStopped)
	if _, err := os.Stat(bundleFor(d.bundles, "m").Installed()); err == nil {
		t.Fatal("a cancelled install was recorded as done")
	}
}
