// Package atomicfile writes files so that a crash leaves the old file or the
// new one, never a torn one: the agent's state, the drivers' records and the
// hub's keys all depend on it.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to path with mode perm, durably: it is in a temporary
// file beside path, synced, then renamed over path, and the directory is
// synced so the rename survives a power cut. When Write returns nil the
// data is on disk.
func Write(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// Mode first, so a key is never readable by others, even briefly.
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
