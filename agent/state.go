package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gofrs/flock"

	"einsora.dev/edge/internal/atomicfile"
	"einsora.dev/edge/protocol"
)

// Files in the state directory.
const (
	machineIDFile = "machine-id"
	stateFile     = "state.json"
	lockFile      = "agent.lock"
	lastSyncFile  = "last-sync"
)

// ErrLocked is returned when another agent holds the state directory.
var ErrLocked = errors.New("another agent holds the state directory")

// lockWait is how long an agent starting (or enrolling) waits for its state
// lock: status and doctor take the lock, shared, for a moment to see whether
// an agent runs (probeRunning), and an agent starting in that moment must
// not take the probe for a second agent. A second agent holds the lock for
// good, so this only delays its error.
const lockWait = time.Second

// lockState takes the OS lock that lets one agent run per state directory,
// and writes this process's ID into the lock file so a second agent can say
// who holds it. The lock is released by the OS if the process dies.
func lockState(dir string) (*flock.Flock, error) {
	path := filepath.Join(dir, lockFile)
	fl := flock.New(path)
	ctx, cancel := context.WithTimeout(context.Background(), lockWait)
	defer cancel()
	ok, err := fl.TryLockContext(ctx, 10*time.Millisecond)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !ok {
		holder := "an unknown process"
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				holder = "process " + strconv.Itoa(pid)
			}
		}
		return nil, fmt.Errorf("%w: %s is held by %s; stop that agent first", ErrLocked, dir, holder)
	}
	// Written through a second descriptor: flock locks belong to the
	// descriptor that took them, so this leaves the lock alone.
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		fl.Unlock()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return fl, nil
}

// probeRunning reports whether an agent holds the state lock in dir. It
// takes the lock shared, so two probes never see each other as an agent,
// and lets go at once; an agent starting meanwhile waits (lockWait).
func probeRunning(dir string) (bool, error) {
	fl := flock.New(filepath.Join(dir, lockFile))
	ok, err := fl.TryRLock()
	if err != nil {
		return false, err
	}
	if ok {
		fl.Unlock()
	}
	return !ok, nil
}

// LoadMachineID returns the ID of the machine whose agent keeps its state
// in dir, making the directory and the ID the first time.
func LoadMachineID(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("state dir: %w", err)
	}
	return loadMachineID(dir)
}

// loadMachineID reads the machine's ID, making and saving one the first
// time. The ID lives next to the agent's database, never derived from the
// hostname, so a renamed machine stays itself and a copied disk is caught by
// enrolment, not confused with its original.
func loadMachineID(dir string) (string, error) {
	path := filepath.Join(dir, machineIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" || len(id) > protocol.MaxIDLength {
			return "", fmt.Errorf("machine id in %s is malformed; remove the file to make a new one (the hub will see a new machine)", path)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read machine id: %w", err)
	}
	var raw [16]byte
	rand.Read(raw[:])
	id := "m-" + hex.EncodeToString(raw[:])
	if err := atomicfile.Write(path, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("save machine id: %w", err)
	}
	return id, nil
}

// localState is the agent's database: what it must not forget across
// restarts. It is small and rewritten whole, atomically.
type localState struct {
	// Desired is the last desired state accepted from the hub, so the
	// agent keeps applying it while the hub is unreachable.
	Desired *protocol.SyncResponse `json:"desired,omitempty"`
	// Workloads holds, per workload the agent has started, the facts that
	// keep it safe: which attempt it started (so an attempt starts at most
	// once) and under which driver its data lives.
	Workloads map[string]*held `json:"workloads"`
	// Hubs are the hub replicas' URLs the hub last sent (bounded by
	// protocol.KeepHubs), failed over to after the --hub flags; kept so a
	// restarted agent can reach a replica its command line does not name.
	Hubs []string `json:"hubs,omitempty"`
}

type held struct {
	Driver         string `json:"driver"`
	StartedAttempt int64  `json:"started_attempt"`
	// Devices are the devices the attempt reserved.
	Devices []string `json:"devices,omitempty"`
	// StartFailure is why the driver refused to start the attempt.
	StartFailure string `json:"start_failure,omitempty"`
	// Restarts counts the local restarts of StartedAttempt under its
	// restart policy (restart.go).
	Restarts int `json:"restarts,omitempty"`
}

func loadState(dir string) (*localState, error) {
	st := &localState{Workloads: map[string]*held{}}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read agent state: %w", err)
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("agent state %s is corrupt: %w", filepath.Join(dir, stateFile), err)
	}
	if st.Workloads == nil {
		st.Workloads = map[string]*held{}
	}
	return st, nil
}

func saveState(dir string, st *localState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode agent state: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, stateFile), b, 0o600); err != nil {
		return fmt.Errorf("save agent state: %w", err)
	}
	return nil
}
