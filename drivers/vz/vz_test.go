package vz

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/driverstest"
	"einsora.dev/edge/protocol"
)

func ctxT(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// image writes a fake image file and returns its path.
func image(t *testing.T, dir, name, opts string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("fake: "+opts+"\n"+strings.Repeat("x", 4096)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// newTestDriver makes a driver whose helpers are fake, and kills any
// helper left over when the test ends.
func newTestDriver(t *testing.T, o Options) *Driver {
	t.Helper()
	if o.HelperCommand == nil {
		o.HelperCommand = helperCommand("fake")
	}
	if o.StopGrace == 0 {
		o.StopGrace = 3 * time.Second
	}
	if o.ForceWait == 0 {
		o.ForceWait = 2 * time.Second
	}
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		for _, b := range d.scan() {
			if live(b) {
				_ = d.killHelper(b)
			}
		}
	})
	return d
}

func spec(w, image string, attempt int64) drivers.Spec {
	return drivers.Spec{Workload: w, Attempt: attempt, Kind: protocol.KindVM, Image: image,
		Resources: protocol.Resources{CPUs: 2, MemoryMB: 2048}}
}

func waitState(t *testing.T, d *Driver, w string, want drivers.State) drivers.Instance {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last drivers.Instance
	for time.Now().Before(deadline) {
		list, err := d.List(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range list {
			if in.Workload == w {
				last = in
				if in.State == want {
					return in
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: never %s; last %+v", w, want, last)
	return last
}

func helperPid(t *testing.T, d *Driver, w string) int {
	t.Helper()
	raw, err := os.ReadFile(bundleFor(d.bundles, w).PidFile())
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestConformance(t *testing.T) {
	dir := t.TempDir()
	imgs := t.TempDir()
	var d *Driver
	driverstest.Run(t, func(t *testing.T) drivers.Driver {
		d = newTestDriver(t, Options{Dir: dir})
		return d
	}, driverstest.Options{
		Image:        image(t, imgs, "run.raw", "run"),
		ExitImage:    image(t, imgs, "exit.raw", "exit-after=150ms"),
		ExitCode:     0,
		MissingImage: filepath.Join(imgs, "absent.raw"),
		Kind:         protocol.KindVM,
		Resources:    protocol.Resources{CPUs: 1, MemoryMB: 512},
		WriteData: func(t *testing.T, w, name, content string) {
			if err := os.WriteFile(filepath.Join(d.DataDir(w), name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		ReadData: func(t *testing.T, w, name string) (string, bool) {
			b, err := os.ReadFile(filepath.Join(d.DataDir(w), name))
			return string(b), err == nil
		},
		// The MAC is made once per bundle: the same instance keeps it.
		InstanceID: func(t *testing.T, w string) string {
			m, err := ReadMAC(bundleFor(d.bundles, w))
			if err != nil {
				return ""
			}
			return m
		},
	})
}

// An agent restart never stops a VM: the new driver adopts the helper, and
// a helper killed with SIGKILL shows as exited (helper lost), then starts
// again on the same bundle.
func TestRestartAdoptsAndKill9IsReported(t *testing.T) {
	dir, imgs := t.TempDir(), t.TempDir()
	img := image(t, imgs, "run.raw", "run")
	d1 := newTestDriver(t, Options{Dir: dir})
	for _, w := range []string{"a", "b"} {
		if err := d1.Start(ctxT(t), spec(w, img, 1)); err != nil {
			t.Fatal(err)
		}
	}
	waitState(t, d1, "a", drivers.StateRunning)
	waitState(t, d1, "b", drivers.StateRunning)
	pid := helperPid(t, d1, "a")
	mac, _ := ReadMAC(bundleFor(d1.bundles, "a"))
	d1.Close()

	d2 := newTestDriver(t, Options{Dir: dir})
	if got := d2.Adopted(); got != 2 {
		t.Fatalf("adopted %d helpers, want 2", got)
	}
	waitState(t, d2, "a", drivers.StateRunning)
	if got := helperPid(t, d2, "a"); got != pid {
		t.Fatalf("helper pid %d after restart, want %d: the VM was restarted", got, pid)
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	in := waitState(t, d2, "a", drivers.StateExited)
	if in.ExitCode != -1 || !strings.HasPrefix(in.Detail, string(ReasonHelperLost)) {
		t.Fatalf("after kill -9: %+v, want exit -1 and %s", in, ReasonHelperLost)
	}
	if err := d2.Start(ctxT(t), spec("a", img, 2)); err != nil {
		t.Fatal(err)
	}
	in = waitState(t, d2, "a", drivers.StateRunning)
	if in.Attempt != 2 {
		t.Fatalf("attempt %d, want 2", in.Attempt)
	}
	if got, _ := ReadMAC(bundleFor(d2.bundles, "a")); got != mac {
		t.Fatalf("MAC %s after restart, want %s kept", got, mac)
	}
	if helperPid(t, d2, "a") == pid {
		t.Fatal("same pid: no new helper")
	}
}

// A guest that ignores the shutdown request is forced off after the grace
// period; the bundle is kept.
func TestStopForcesAfterGrace(t *testing.T) {
	dir, imgs := t.TempDir(), t.TempDir()
	d := newTestDriver(t, Options{Dir: dir, StopGrace: 300 * time.Millisecond})
	if err := d.Start(ctxT(t), spec("w", image(t, imgs, "stubborn.raw", "ignore-stop"), 1)); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, "w", drivers.StateRunning)
	start := time.Now()
	if err := d.Stop(ctxT(t), "w"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("stop took %v: did not wait for the grace period", el)
	}
	waitState(t, d, "w", drivers.StateStopped)
	log, _ := os.ReadFile(bundleFor(d.bundles, "w").HelperLog())
	if !strings.Contains(string(log), "forcing the VM to stop") {
		t.Fatalf("helper log does not say it forced the VM:\n%s", log)
	}
	if _, err := os.Stat(bundleFor(d.bundles, "w").Disk()); err != nil {
		t.Fatalf("park lost the disk: %v", err)
	}
}

// A helper that holds its bundle but never answers is reported, and Stop
// kills it.
func TestHungHelperIsKilledOnStop(t *testing.T) {
	dir, imgs := t.TempDir(), t.TempDir()
	d := newTestDriver(t, Options{Dir: dir, HelperCommand: helperCommand("hang"), HelperWait: 500 * time.Millisecond,
		StopGrace: 200 * time.Millisecond, ForceWait: 200 * time.Millisecond})
	if err := d.Start(ctxT(t), spec("w", image(t, imgs, "run.raw", "run"), 1)); err != nil {
		t.Fatal(err)
	}
	in := waitState(t, d, "w", drivers.StateFailed)
	if in.Code != protocol.CodeFailedStart || !strings.HasPrefix(in.Detail, string(ReasonHelperUnresponsive)) {
		t.Fatalf("got %+v, want failed_start %s", in, ReasonHelperUnresponsive)
	}
	b := bundleFor(d.bundles, "w")
	if !live(b) {
		t.Fatal("hung helper not holding the bundle")
	}
	if err := d.Stop(ctxT(t), "w"); err != nil {
		t.Fatal(err)
	}
	if live(b) {
		t.Fatal("hung helper survived Stop")
	}
}

// A helper whose socket answers garbage is listed with a fixed code, and
// the listing does not hang.
func TestGarbageHelperGivesFixedCode(t *testing.T) {
	dir, imgs := t.TempDir(), t.TempDir()
	d := newTestDriver(t, Options{Dir: dir, HelperCommand: helperCommand("garbage"), HelperWait: 300 * time.Millisecond,
		StopGrace: 100 * time.Millisecond, ForceWait: 100 * time.Millisecond})
	if err := d.Start(ctxT(t), spec("w", image(t, imgs, "run.raw", "run"), 1)); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, "w", drivers.StateFailed)
	// Clear the start failure: List now asks the live helper.
	b := bundleFor(d.bundles, "w")
	cfg, _ := loadConfig(b)
	cfg.Failed, cfg.Detail = "", ""
	if err := saveConfig(b, cfg); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	in := waitState(t, d, "w", drivers.StateRunning)
	if !strings.HasPrefix(in.Detail, string(ReasonControlGarbage)) {
		t.Fatalf("got %+v, want detail %s", in, ReasonControlGarbage)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("listing took %v", el)
	}
}

// The guest's own crash is an exit with code 1 and the VM error reason.
func TestGuestErrorIsExit1(t *testing.T) {
	dir, imgs := t.TempDir(), t.TempDir()
	d := newTestDriver(t, Options{Dir: dir})
	if err := d.Start(ctxT(t), spec("w", image(t, imgs, "crash.raw", "error-after=300ms"), 1)); err != nil {
		t.Fatal(err)
	}
	in := waitState(t, d, "w", drivers.StateExited)
	if in.ExitCode != 1 || !strings.HasPrefix(in.Detail, string(ReasonVMError)) {
		t.Fatalf("got %+v", in)
	}
}

// A corrupt bundle is never deleted by Start or List; Start fails with a
// fixed code and Remove deletes it.
func TestCorruptBundleIsKept(t *testing.T) {
	dir := t.TempDir()
	d := newTestDriver(t, Options{Dir: dir})
	b := bundleFor(d.bundles, "w")
	if err := os.MkdirAll(b.Data(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Config(), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.Data(), "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := d.Start(ctxT(t), spec("w", "/x.raw", 1))
	if reasonOf(err, "") != ReasonBundleCorrupt {
		t.Fatalf("start: %v, want %s", err, ReasonBundleCorrupt)
	}
	in := waitState(t, d, "w", drivers.StateFailed)
	if !strings.HasPrefix(in.Detail, string(ReasonBundleCorrupt)) {
		t.Fatalf("got %+v", in)
	}
	if _, err := os.Stat(filepath.Join(b.Data(), "keep")); err != nil {
		t.Fatalf("data of a corrupt bundle was deleted: %v", err)
	}
	if err := d.Remove(ctxT(t), "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Dir); !os.IsNotExist(err) {
		t.Fatalf("remove left the bundle: %v", err)
	}
	list, _ := d.List(ctxT(t))
	if len(list) != 0 {
		t.Fatalf("after remove: %+v", list)
	}
}

// Helpers that hang cost List one control timeout, not one each.
func TestListAsksHelpersAtOnce(t *testing.T) {
	dir, imgs := t.TempDir(), t.TempDir()
	d := newTestDriver(t, Options{Dir: dir, HelperCommand: helperCommand("hang"), HelperWait: 200 * time.Millisecond,
		StopGrace: 100 * time.Millisecond, ForceWait: 100 * time.Millisecond})
	img := image(t, imgs, "run.raw", "run")
	ws := []string{"h1", "h2", "h3"}
	for _, w := range ws {
		if err := d.Start(ctxT(t), spec(w, img, 1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws {
		waitState(t, d, w, drivers.StateFailed)
		// A Start on a live helper takes it as running: List asks it.
		if err := d.Start(ctxT(t), spec(w, img, 2)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	list, err := d.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > controlTimeout+time.Second {
		t.Fatalf("list took %v for %d hung helpers", el, len(ws))
	}
	for _, in := range list {
		if in.State != drivers.StateRunning || !strings.HasPrefix(in.Detail, string(ReasonHelperUnresponsive)) {
			t.Errorf("%+v, want running with %s", in, ReasonHelperUnresponsive)
		}
	}
	if len(list) != len(ws) {
		t.Fatalf("listed %d, want %d", len(list), len(ws))
	}
}
