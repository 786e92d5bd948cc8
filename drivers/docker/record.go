package docker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"einsora.dev/edge/internal/atomicfile"
)

// entry is what the engine cannot hold about one workload's container:
// container labels are fixed at creation, but the attempt changes on every
// Start, and the engine does not say whether a container exited by itself
// or was stopped on request.
type entry struct {
	// Container is the container the entry is about; an entry about
	// another container (one removed behind the driver's back) is ignored.
	Container string `json:"container"`
	Attempt   int64  `json:"attempt"`
	Stopped   bool   `json:"stopped,omitempty"`
	// Spec is specHash of what the container was created from; a Start
	// with another remakes it. Empty (an older record) never does.
	Spec string `json:"spec,omitempty"`
}

// records is the driver's record, kept in a JSON file when it has a
// directory.
type records struct {
	path string // "" keeps it in memory
	log  *slog.Logger

	mu sync.Mutex
	m  map[string]entry
}

func loadRecords(dir, name string, log *slog.Logger) (*records, error) {
	r := &records{log: log, m: make(map[string]entry)}
	if dir == "" {
		return r, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	r.path = filepath.Join(dir, name+"-records.json")
	b, err := os.ReadFile(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read records: %w", err)
	}
	if err := json.Unmarshal(b, &r.m); err != nil {
		// Losing the record costs only accuracy (attempts fall back to
		// labels), so a damaged file must not keep the driver down.
		log.Warn("ignoring damaged record file", "path", r.path, "err", err)
		r.m = make(map[string]entry)
	}
	return r, nil
}

func (r *records) get(w string) (entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[w]
	return e, ok
}

func (r *records) set(w string, e entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.m[w]; ok && old == e {
		return
	}
	r.m[w] = e
	r.save()
}

func (r *records) remove(w string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[w]; !ok {
		return
	}
	delete(r.m, w)
	r.save()
}

// save writes the record atomically. A failure is logged, not returned:
// the engine operation it accompanies matters more, and the record in
// memory stays right until the agent restarts.
func (r *records) save() {
	if r.path == "" {
		return
	}
	if err := r.write(); err != nil {
		r.log.Warn("cannot save record", "path", r.path, "err", err)
	}
}

func (r *records) write() error {
	b, err := json.Marshal(r.m)
	if err != nil {
		return err
	}
	return atomicfile.Write(r.path, b, 0o600)
}
