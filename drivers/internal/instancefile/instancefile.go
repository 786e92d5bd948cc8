// Package instancefile keeps a driver's instances as files: a JSON record
// per workload, written atomically, beside a directory for its data. The
// sim and macos-native drivers share it.
package instancefile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"einsora.dev/edge/internal/atomicfile"
)

// Name maps a workload ID to a file name that cannot leave the driver's
// directory. An ID that had to be changed gets a hash of the original, so
// two IDs ("a.b", "a_b") never share a name.
func Name(workload string) string {
	s := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, workload)
	if s == workload {
		return s
	}
	sum := sha256.Sum256([]byte(workload))
	return s + "-" + hex.EncodeToString(sum[:4])
}

// RecordPath is where the workload's record lives under dir.
func RecordPath(dir, workload string) string {
	return filepath.Join(dir, Name(workload)+".json")
}

// Load reads a record; an absent one is an error wrapping os.ErrNotExist.
func Load[T any](path string) (*T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r T
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode %s: %w", filepath.Base(path), err)
	}
	return &r, nil
}

// Save writes a record atomically, so a crash leaves the old record or the
// new one, never half of one.
func Save(path string, r any) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o600)
}
