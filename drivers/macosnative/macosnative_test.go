//go:build unix

package macosnative

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/driverstest"
	"einsora.dev/edge/drivers/internal/instancefile"
	"einsora.dev/edge/protocol"
)

// prog is the test workload built from testdata/prog.
var prog string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "macosnative-prog")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		prog = filepath.Join(dir, "prog")
		out, err := exec.Command("go", "build", "-o", prog, "./testdata/prog").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "building testdata/prog: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}())
}

// newDriver makes a driver over dir and, when the test ends, kills any
// process its records still name (after the test's own cleanups ran).
func newDriver(t *testing.T, o Options) *Driver {
	t.Helper()
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killLeftovers(t, o.Dir) })
	return d
}

func killLeftovers(t *testing.T, dir string) {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, p := range paths {
		r, err := instancefile.Load[record](p)
		if err != nil || r.Pid <= 0 || r.Pid == os.Getpid() {
			continue
		}
		if alive(r.Pid, r.StartTime) {
			t.Logf("cleanup: killing leftover %s pid %d", r.Workload, r.Pid)
			_ = killGroup(r.Pid)
		}
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestConformance(t *testing.T) {
	dir := t.TempDir()
	var d *Driver
	driverstest.Run(t, func(t *testing.T) drivers.Driver {
		d = newDriver(t, Options{Dir: dir, StopGrace: 5 * time.Second})
		return d
	}, driverstest.Options{
		Image:        "exec:/bin/sleep 3600",
		ExitImage:    "exec:" + prog + " exit 3",
		ExitCode:     3,
		MissingImage: "exec:/nonexistent/prog",
		Timeout:      15 * time.Second,
		WriteData: func(t *testing.T, w, name, content string) {
			if err := os.WriteFile(filepath.Join(d.DataDir(w), name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		ReadData: func(t *testing.T, w, name string) (string, bool) {
			b, err := os.ReadFile(filepath.Join(d.DataDir(w), name))
			return string(b), err == nil
		},
	})
}

// waitState polls List until w is in state.
func waitState(t *testing.T, d *Driver, w string, state drivers.State) drivers.Instance {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		inst, ok := find(t, d, w)
		if ok && inst.State == state {
			return inst
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: waiting for %s; last %+v (found %v)", w, state, inst, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func find(t *testing.T, d *Driver, w string) (drivers.Instance, bool) {
	t.Helper()
	list, err := d.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list {
		if in.Workload == w {
			return in, true
		}
	}
	return drivers.Instance{}, false
}

func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func start(t *testing.T, d *Driver, w string, attempt int64, image string) {
	t.Helper()
	if err := d.Start(ctx(t), drivers.Spec{Workload: w, Attempt: attempt, Kind: protocol.KindContainer, Image: image}); err != nil {
		t.Fatalf("Start(%s): %v", w, err)
	}
}

func TestAgentRestartKeepsTheProcess(t *testing.T) {
	dir := t.TempDir()
	d1 := newDriver(t, Options{Dir: dir})
	w := "serve"
	start(t, d1, w, 1, "exec:"+prog+" serve")
	waitState(t, d1, w, drivers.StateRunning)
	boots := filepath.Join(d1.DataDir(w), "boots")
	waitFile(t, boots)
	r1, _ := d1.load(w)
	d1.Close()

	d2 := newDriver(t, Options{Dir: dir})
	inst := waitState(t, d2, w, drivers.StateRunning)
	if inst.Attempt != 1 {
		t.Errorf("got attempt %d, want 1", inst.Attempt)
	}
	start(t, d2, w, 1, "exec:"+prog+" serve")
	waitState(t, d2, w, drivers.StateRunning)
	r2, _ := d2.load(w)
	if r2.Pid != r1.Pid || r2.Starts != 1 {
		t.Errorf("after restart and Start: pid %d starts %d, want pid %d starts 1", r2.Pid, r2.Starts, r1.Pid)
	}
	if b, _ := os.ReadFile(boots); strings.Count(string(b), "\n") != 1 {
		t.Errorf("boots: %q, want one boot", b)
	}
	if b, _ := os.ReadFile(d2.LogPath(w)); !strings.Contains(string(b), "serving") {
		t.Errorf("log: %q, want it to hold the program's output", b)
	}

	// Stop through the new driver, which did not start the process.
	if err := d2.Stop(ctx(t), w); err != nil {
		t.Fatal(err)
	}
	waitState(t, d2, w, drivers.StateStopped)
	if alive(r1.Pid, r1.StartTime) {
		t.Errorf("pid %d alive after Stop", r1.Pid)
	}
	if err := d2.Remove(ctx(t), w); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, w)); !os.IsNotExist(err) {
		t.Errorf("workload directory after Remove: %v, want gone", err)
	}
}

func TestExitWhileAgentAwayIsUnknown(t *testing.T) {
	dir := t.TempDir()
	d1 := newDriver(t, Options{Dir: dir})
	w := "away"
	start(t, d1, w, 1, "exec:"+prog+" serve")
	waitState(t, d1, w, drivers.StateRunning)
	waitFile(t, filepath.Join(d1.DataDir(w), "boots"))
	r, _ := d1.load(w)
	d1.Close()
	if err := termGroup(r.Pid); err != nil {
		t.Fatal(err)
	}
	d2 := newDriver(t, Options{Dir: dir})
	inst := waitState(t, d2, w, drivers.StateExited)
	if inst.ExitCode != -1 || !strings.Contains(inst.Detail, "unknown") {
		t.Errorf("got exit code %d detail %q, want -1 and a detail saying it is unknown", inst.ExitCode, inst.Detail)
	}
	// Start restarts it, keeping the data.
	start(t, d2, w, 2, "exec:"+prog+" serve")
	waitState(t, d2, w, drivers.StateRunning)
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(d2.DataDir(w), "boots"))
		if strings.Count(string(b), "\n") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("boots: %q, want two boots", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d2.Remove(ctx(t), w); err != nil {
		t.Fatal(err)
	}
}

func TestPidReuseGuard(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, Options{Dir: dir})
	// Records naming this test process, which is alive: with its real
	// start time it reads as running, with another one as exited.
	self := os.Getpid()
	st, err := procStart(self)
	if err != nil {
		t.Skipf("no process start time here: %v", err)
	}
	for _, r := range []record{
		{Workload: "same", Attempt: 1, Pid: self, StartTime: st},
		{Workload: "reused", Attempt: 1, Pid: self, StartTime: st + 1},
	} {
		b, _ := json.Marshal(r)
		if err := os.WriteFile(instancefile.RecordPath(d.dir, r.Workload), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if in, _ := find(t, d, "same"); in.State != drivers.StateRunning {
		t.Errorf("same start time: got %+v, want running", in)
	}
	in, _ := find(t, d, "reused")
	if in.State != drivers.StateExited || in.ExitCode != -1 {
		t.Errorf("other start time: got %+v, want exited with code -1", in)
	}
	// Stop of the reused pid must not signal this process.
	if err := d.Stop(ctx(t), "reused"); err != nil {
		t.Fatal(err)
	}
	if in, _ := find(t, d, "reused"); in.State != drivers.StateStopped {
		t.Errorf("after Stop: got %+v, want stopped", in)
	}
	os.Remove(instancefile.RecordPath(d.dir, "same"))
}

func TestStopKillsAfterGrace(t *testing.T) {
	grace := 300 * time.Millisecond
	d := newDriver(t, Options{Dir: t.TempDir(), StopGrace: grace})
	w := "stubborn"
	start(t, d, w, 1, "exec:"+prog+" ignore-term")
	waitFile(t, filepath.Join(d.DataDir(w), "ready"))
	r, _ := d.load(w)
	begin := time.Now()
	if err := d.Stop(ctx(t), w); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took < grace {
		t.Errorf("Stop took %v, want at least the grace period %v", took, grace)
	}
	inst := waitState(t, d, w, drivers.StateStopped)
	if alive(r.Pid, r.StartTime) {
		t.Errorf("pid %d alive after Stop", r.Pid)
	}
	if !strings.Contains(inst.Detail, "signal 9") {
		t.Errorf("detail %q, want it to say it was killed by signal 9", inst.Detail)
	}
	if err := d.Remove(ctx(t), w); err != nil {
		t.Fatal(err)
	}
}

func TestStopHonoursContext(t *testing.T) {
	d := newDriver(t, Options{Dir: t.TempDir(), StopGrace: time.Minute})
	w := "stubborn"
	start(t, d, w, 1, "exec:"+prog+" ignore-term")
	waitFile(t, filepath.Join(d.DataDir(w), "ready"))
	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := d.Stop(c, w); err == nil {
		t.Fatal("Stop past its deadline: got nil, want an error")
	}
	if in, _ := find(t, d, w); in.State != drivers.StateStopping {
		t.Errorf("got %+v, want stopping", in)
	}
	r, _ := d.load(w)
	_ = killGroup(r.Pid)
	waitState(t, d, w, drivers.StateStopped)
}

func TestRefusedImages(t *testing.T) {
	d := newDriver(t, Options{Dir: t.TempDir(), Allowed: []string{filepath.Dir(prog)}})
	for i, image := range []string{
		"exec:bin/sleep 10",       // relative
		"exec:./prog serve",       // relative
		"exec:",                   // no program
		"docker.io/library/nginx", // not exec:
		"exec:/bin/sleep 10",      // outside Allowed
		"exec:" + filepath.Dir(prog) + "/../../bin/sleep 10", // escapes Allowed
		"exec:" + filepath.Dir(prog),                         // the directory itself
	} {
		w := fmt.Sprintf("refused-%d", i)
		start(t, d, w, 1, image)
		in, _ := find(t, d, w)
		if in.State != drivers.StateFailed || in.Code != protocol.CodeImageUnavailable {
			t.Errorf("%q: got %+v, want failed with %s", image, in, protocol.CodeImageUnavailable)
		}
	}
	w := "allowed"
	start(t, d, w, 1, "exec:"+prog+" serve")
	waitState(t, d, w, drivers.StateRunning)
	if err := d.Remove(ctx(t), w); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Dir: t.TempDir(), Allowed: []string{"relative/dir"}}); err == nil {
		t.Error("New with a relative allowed directory: got nil error")
	}
}

func TestSafeName(t *testing.T) {
	if instancefile.Name("a.b") == instancefile.Name("a_b") {
		t.Error("a.b and a_b share a name")
	}
	if got := instancefile.Name("../x"); strings.ContainsAny(got, "./") {
		t.Errorf("instancefile.Name(../x) = %q", got)
	}
}
