package agent

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gofrs/flock"
)

// probing holds dir's state lock as probeRunning does (shared), the way a
// status or doctor run holds it for a moment, until the test lets go.
func probing(t *testing.T, dir string) *flock.Flock {
	t.Helper()
	fl := flock.New(filepath.Join(dir, lockFile))
	if ok, err := fl.TryRLock(); err != nil || !ok {
		t.Fatalf("take the probe's lock: %v, %v", ok, err)
	}
	t.Cleanup(func() { fl.Unlock() })
	return fl
}

// An agent that starts while `einsora-agent status` or `doctor` looks at its
// lock waits for the look to end instead of taking it for a second agent.
func TestAgentStartsWhileStatusLooksAtItsLock(t *testing.T) {
	dir := t.TempDir()
	probe := probing(t, dir)
	time.AfterFunc(lockWait/5, func() { probe.Unlock() })
	lock, err := lockState(dir)
	if err != nil {
		t.Fatalf("an agent starting during a status probe: %v", err)
	}
	lock.Unlock()
}

// A second agent is still refused once the wait is over.
func TestAgentStillRefusedWhileAnotherHoldsTheLock(t *testing.T) {
	dir := t.TempDir()
	first, err := lockState(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Unlock()
	if _, err := lockState(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second agent: %v, want ErrLocked", err)
	}
}

// Two probes at once do not see each other as an agent; an agent they see.
func TestStatusProbesSeeOnlyAnAgent(t *testing.T) {
	dir := t.TempDir()
	probing(t, dir)
	if running, err := probeRunning(dir); err != nil || running {
		t.Fatalf("a probe beside another probe: running %v, %v; want no agent", running, err)
	}
	if _, err := lockState(dir); err == nil {
		t.Fatal("an agent took the lock while a probe held it")
	}
	dir = t.TempDir()
	lock, err := lockState(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	if running, err := probeRunning(dir); err != nil || !running {
		t.Fatalf("a probe beside an agent: running %v, %v; want an agent", running, err)
	}
}
