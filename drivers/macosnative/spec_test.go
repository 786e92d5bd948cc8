//go:build unix

package macosnative

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/protocol"
)

// TestSpecHonoured: the command replaces the image's arguments, the
// environment (secret included) reaches the process, the working directory
// and volumes are made inside the data directory, and the secret is never
// logged.
func TestSpecHonoured(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	d := newDriver(t, Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	const w, secret = "w-spec", "s3cret-never-logged"
	spec := drivers.Spec{Workload: w, Attempt: 1, Image: "exec:" + prog + " serve",
		Resources: protocol.Resources{MemoryMB: 256},
		WorkloadSpec: protocol.WorkloadSpec{
			Command:   []string{"report", "two words", "x"},
			Env:       map[string]string{"GREETING": "hello"},
			SecretEnv: map[string]string{"TOKEN": secret},
			Workdir:   "/srv/app",
			Volumes:   []protocol.Volume{{Name: "cache", Path: "/cache"}},
			Ports:     []protocol.Port{{Host: 8080, Container: 8080}},
		}}
	if err := d.Start(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, w, drivers.StateExited)
	var got struct {
		Args     []string
		Greeting string
		Token    string
		Cwd      string
		Data     string
	}
	if err := json.Unmarshal([]byte(waitFile(t, filepath.Join(d.DataDir(w), "report.json"))), &got); err != nil {
		t.Fatal(err)
	}
	if want := []string{"report", "two words", "x"}; !reflect.DeepEqual(got.Args, want) {
		t.Errorf("args: got %q, want %q", got.Args, want)
	}
	if got.Greeting != "hello" || got.Token != secret {
		t.Errorf("env: GREETING %q, TOKEN %q", got.Greeting, got.Token)
	}
	wantCwd, _ := filepath.EvalSymlinks(filepath.Join(d.DataDir(w), "srv", "app"))
	if gotCwd, _ := filepath.EvalSymlinks(got.Cwd); gotCwd != wantCwd {
		t.Errorf("cwd: got %q, want %q", got.Cwd, wantCwd)
	}
	if st, err := os.Stat(filepath.Join(d.DataDir(w), "cache")); err != nil || !st.IsDir() {
		t.Errorf("volume directory: %v", err)
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the driver logged the secret:\n%s", logs.String())
	}
	if logs.Len() == 0 {
		t.Error("the driver logged nothing: the secret check proves nothing")
	}
}

func TestSpecRefused(t *testing.T) {
	d := newDriver(t, Options{Dir: t.TempDir()})
	err := d.Start(ctx(t), drivers.Spec{Workload: "w", Attempt: 1, Image: "exec:" + prog + " serve",
		WorkloadSpec: protocol.WorkloadSpec{Env: map[string]string{"1BAD": "x"}}})
	if !errors.Is(err, protocol.ErrInvalidSpec) {
		t.Errorf("bad env: got %v, want ErrInvalidSpec", err)
	}
	if err := d.Start(ctx(t), drivers.Spec{Workload: "w", Attempt: 1, Image: "exec:" + prog + " serve",
		WorkloadSpec: protocol.WorkloadSpec{Ports: []protocol.Port{{Host: 8080, Container: 80}}}}); err != nil {
		t.Fatal(err)
	}
	in := waitState(t, d, "w", drivers.StateFailed)
	if in.Code != protocol.CodeFailedStart || !strings.Contains(in.Detail, "8080:80") {
		t.Errorf("mapped port: got %+v, want failed_start naming the port", in)
	}
}

// TestMemoryLimit: on Linux a workload that allocates past its class's
// memory fails; the same allocation under a larger class succeeds.
func TestMemoryLimit(t *testing.T) {
	if !LimitsEnforced {
		t.Skip("memory limits are not enforced on this OS")
	}
	d := newDriver(t, Options{Dir: t.TempDir()})
	run := func(w string, memoryMB int) drivers.Instance {
		if err := d.Start(ctx(t), drivers.Spec{Workload: w, Attempt: 1, Image: "exec:" + prog + " alloc 200",
			Resources: protocol.Resources{MemoryMB: memoryMB}}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			if in, ok := find(t, d, w); ok && in.State == drivers.StateExited {
				return in
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not exit", w)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if in := run("small", 64); in.ExitCode == 0 {
		t.Errorf("200 MiB under a 64 MiB class: exited 0, want a failure")
	}
	if in := run("large", 1024); in.ExitCode != 0 {
		t.Errorf("200 MiB under a 1 GiB class: exit %d (%s), want 0", in.ExitCode, in.Detail)
	}
}
