package vz

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/flock"
)

// The tests run helpers as real processes: this test binary, re-executed
// with EINSORA_VZ_TEST_HELPER set, runs RunHelper over fakeHV (or, for
// the bad-helper tests, a helper that hangs or answers garbage). The fake
// lives only in test files, so no build of the agent can fall back to it.

const (
	envHelper = "EINSORA_VZ_TEST_HELPER"
	envBundle = "EINSORA_VZ_TEST_BUNDLE"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envHelper); mode != "" {
		os.Exit(helperMain(mode, os.Getenv(envBundle)))
	}
	os.Exit(m.Run())
}

func helperMain(mode, dir string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	switch mode {
	case "fake":
		if err := RunHelper(context.Background(), dir, fakeHV{}, log); err != nil {
			log.Error("helper", "err", err)
			return 1
		}
		return 0
	case "hang", "garbage":
		b := Bundle{Dir: dir}
		l := flock.New(b.Lock())
		if ok, err := l.TryLock(); !ok || err != nil {
			return 3
		}
		_ = os.Remove(b.Socket())
		ln, err := net.Listen("unix", b.Socket())
		if err != nil {
			return 4
		}
		_ = os.WriteFile(b.PidFile(), []byte(strconv.Itoa(os.Getpid())), 0o600)
		for {
			c, err := ln.Accept()
			if err != nil {
				return 5
			}
			if mode == "garbage" {
				_, _ = bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte("{\"state\":\"dancing\"}\n"))
				c.Close()
			}
			// "hang": the connection is left open, never answered.
		}
	}
	return 2
}

// helperCommand runs this test binary as the helper, in mode.
func helperCommand(mode string) func(string) *exec.Cmd {
	return func(bundle string) *exec.Cmd {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), envHelper+"="+mode, envBundle+"="+bundle)
		return c
	}
}

// fakeOpts reads the options a test image carries on its first line:
// "fake:" then space-separated words, e.g. "fake: exit-after=100ms".
func fakeOpts(path string) map[string]string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	line, _ := bufio.NewReader(io.LimitReader(f, 4096)).ReadString('\n')
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "fake:")
	if !ok {
		return nil
	}
	opts := map[string]string{}
	for w := range strings.FieldsSeq(rest) {
		k, v, _ := strings.Cut(w, "=")
		opts[k] = v
	}
	return opts
}

// fakeHV is a Hypervisor whose guests do what their image says.
type fakeHV struct{}

func (fakeHV) InstallMacOS(ctx context.Context, b Bundle, cfg *Config, ipsw string, progress func(int)) error {
	opts := fakeOpts(ipsw)
	step, _ := time.ParseDuration(opts["install-step"])
	for pct := 0; pct <= 100; pct += 20 {
		progress(pct)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(step):
		}
	}
	if _, ok := opts["install-fail"]; ok {
		return errors.New("fake restore failed")
	}
	raw, err := os.ReadFile(ipsw)
	if err != nil {
		return err
	}
	return os.WriteFile(b.Disk(), raw, 0o600)
}

func (fakeHV) Boot(ctx context.Context, b Bundle, cfg *Config) (Machine, error) {
	opts := fakeOpts(b.Disk())
	if opts == nil {
		return nil, fmt.Errorf("fake: disk %s is not a fake image", b.Disk())
	}
	if _, ok := opts["limit"]; ok {
		return nil, fmt.Errorf("fake: %w", ErrLimitExceeded)
	}
	if _, ok := opts["boot-fail"]; ok {
		return nil, errors.New("fake: configuration refused")
	}
	if _, err := ReadMAC(b); err != nil {
		return nil, err
	}
	if err := os.WriteFile(b.Console(), []byte("fake guest booted\n"), 0o600); err != nil {
		return nil, err
	}
	m := &fakeMachine{done: make(chan struct{}), ignoreStop: hasKey(opts, "ignore-stop")}
	if d, err := time.ParseDuration(opts["exit-after"]); err == nil {
		time.AfterFunc(d, func() { m.end(nil) })
	}
	if d, err := time.ParseDuration(opts["error-after"]); err == nil {
		time.AfterFunc(d, func() { m.end(errors.New("fake: guest crashed")) })
	}
	return m, nil
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

type fakeMachine struct {
	once       sync.Once
	done       chan struct{}
	err        error
	ignoreStop bool
}

func (m *fakeMachine) end(err error) {
	m.once.Do(func() { m.err = err; close(m.done) })
}

func (m *fakeMachine) RequestStop() error {
	if !m.ignoreStop {
		time.AfterFunc(30*time.Millisecond, func() { m.end(nil) })
	}
	return nil
}

func (m *fakeMachine) ForceStop() error      { m.end(nil); return nil }
func (m *fakeMachine) Done() <-chan struct{} { return m.done }
func (m *fakeMachine) Err() error            { return m.err }
