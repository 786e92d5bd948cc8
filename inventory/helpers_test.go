package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from what the code gives")

// checkGolden compares v, as indented JSON, with testdata/name.golden.
func checkGolden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("update golden: %v", err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: got\n%s\nwant\n%s", path, got, want)
	}
}

// fakeCommands answers commands, keyed by the command's base name and
// arguments, with a testdata file, or with an error when the value starts
// with "!". A command not listed is not installed.
type fakeCommands map[string]string

func (f fakeCommands) run(_ context.Context, _ time.Duration, name string, args ...string) ([]byte, error) {
	key := strings.Join(append([]string{filepath.Base(name)}, args...), " ")
	v, ok := f[key]
	if !ok {
		return nil, absent(name)
	}
	if msg, isErr := strings.CutPrefix(v, "!"); isErr {
		return nil, errors.New(msg)
	}
	return os.ReadFile(filepath.Join("testdata", v))
}

// fakeSysctl answers sysctl names from maps; others do not exist.
type fakeSysctl struct {
	strs map[string]string
	ints map[string]uint64
}

func (f fakeSysctl) String(name string) (string, error) {
	if v, ok := f.strs[name]; ok {
		return v, nil
	}
	return "", fs.ErrNotExist
}

func (f fakeSysctl) Uint(name string) (uint64, error) {
	if v, ok := f.ints[name]; ok {
		return v, nil
	}
	return 0, fs.ErrNotExist
}

// treeProber probes the Linux tree at root as if from an amd64 agent, with
// cmds standing in for external commands.
func treeProber(root string, cmds fakeCommands) *Prober {
	p := New(Options{Root: root})
	p.goos, p.goarch = "linux", "amd64"
	p.probers = linuxProbers()
	p.run = cmds.run
	return p
}
