package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"einsora.dev/edge/internal/atomicfile"
	"einsora.dev/edge/protocol"
)

// workloadsFile holds what the running agent last saw of each workload, for
// `einsora-agent status`, which runs apart from it.
const workloadsFile = "workloads.json"

// DriverError is the last driver call that failed for a workload.
type DriverError struct {
	Op     string    `json:"op"`
	Driver string    `json:"driver"`
	Error  string    `json:"error"`
	At     time.Time `json:"at"`
}

// WorkloadStatus is one workload as `einsora-agent status` shows it: what
// the agent last reported, and why its driver last failed, which the hub
// shows only as one of its fixed reasons.
type WorkloadStatus struct {
	ID        string        `json:"id"`
	Mode      protocol.Mode `json:"mode,omitempty"`
	Attempt   int64         `json:"attempt,omitempty"`
	State     protocol.Code `json:"state"`
	Detail    string        `json:"detail,omitempty"`
	LastError *DriverError  `json:"last_error,omitempty"`
}

// noteError keeps err as the workload's last driver error.
func (a *Agent) noteError(workload string, err DriverError) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastErr[workload] = err
	a.errorsChanged = true
}

// statusFileLocked encodes the workloads file. It drops the errors of
// workloads the agent neither reports nor holds, so the file is bounded by
// the workloads the machine has.
func (a *Agent) statusFileLocked() []byte {
	out := make([]WorkloadStatus, 0, len(a.statuses))
	for id, s := range a.statuses {
		ws := WorkloadStatus{ID: id, Mode: s.Mode, Attempt: s.Attempt, State: s.Code, Detail: s.Detail}
		if e, ok := a.lastErr[id]; ok {
			ws.LastError = &e
		}
		out = append(out, ws)
	}
	for id := range a.lastErr {
		_, reported := a.statuses[id]
		_, held := a.state.Workloads[id]
		if !reported && !held {
			delete(a.lastErr, id)
		}
	}
	slices.SortFunc(out, func(x, y WorkloadStatus) int { return strings.Compare(x.ID, y.ID) })
	b, _ := json.Marshal(out)
	return b
}

// writeStatusFile writes what statusFileLocked encoded. Only the apply loop
// calls it, so writes never cross.
func (a *Agent) writeStatusFile(b []byte) {
	if err := atomicfile.Write(filepath.Join(a.cfg.StateDir, workloadsFile), b, 0o644); err != nil {
		a.log.Warn("cannot write the workloads file for einsora-agent status", "err", err)
	}
}

// readWorkloadsFile reads the workloads file; a missing one is empty.
func readWorkloadsFile(dir string) ([]WorkloadStatus, error) {
	b, err := os.ReadFile(filepath.Join(dir, workloadsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", workloadsFile, err)
	}
	var ws []WorkloadStatus
	if err := json.Unmarshal(b, &ws); err != nil {
		return nil, fmt.Errorf("%s is corrupt (the running agent rewrites it): %w", filepath.Join(dir, workloadsFile), err)
	}
	return ws, nil
}

// loadLastErrors seeds the last errors from the workloads file, so a
// restart does not forget why a workload failed.
func loadLastErrors(dir string) map[string]DriverError {
	m := map[string]DriverError{}
	ws, _ := readWorkloadsFile(dir)
	for _, w := range ws {
		if w.LastError != nil {
			m[w.ID] = *w.LastError
		}
	}
	return m
}
