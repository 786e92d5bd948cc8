package vz

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"einsora.dev/edge/drivers/internal/instancefile"
	"einsora.dev/edge/protocol"
)

// Bundle is one VM's directory. Everything the VM is lives in it, so
// remove is one RemoveAll and park keeps it whole:
//
//	bundle.json   Config: what the driver asked for (driver writes)
//	disk.img      the raw disk (virtio-blk)
//	efivars       Linux: the EFI variable store
//	mac           the NAT interface's MAC address, text
//	machine-id    the machine identifier (vz's data representation)
//	hardware-model, aux-storage   macOS: kept from the restore
//	installed     macOS: present once the IPSW restore finished
//	console.log   the serial console
//	helper.pid    the helper's pid, while it runs
//	helper.log    the helper's own log (stderr)
//	lock          held (flock) by the helper for its whole life
//	control.sock  the helper's control socket
//	exit.json     why the helper's VM ended (helper writes, at exit)
//	data/         the workload's data, shared with the guest (virtio-fs)
type Bundle struct{ Dir string }

func (b Bundle) Config() string    { return filepath.Join(b.Dir, "bundle.json") }
func (b Bundle) Disk() string      { return filepath.Join(b.Dir, "disk.img") }
func (b Bundle) EFIVars() string   { return filepath.Join(b.Dir, "efivars") }
func (b Bundle) MAC() string       { return filepath.Join(b.Dir, "mac") }
func (b Bundle) MachineID() string { return filepath.Join(b.Dir, "machine-id") }
func (b Bundle) HardwareModel() string {
	return filepath.Join(b.Dir, "hardware-model")
}
func (b Bundle) AuxStorage() string { return filepath.Join(b.Dir, "aux-storage") }
func (b Bundle) Installed() string  { return filepath.Join(b.Dir, "installed") }
func (b Bundle) Console() string    { return filepath.Join(b.Dir, "console.log") }
func (b Bundle) PidFile() string    { return filepath.Join(b.Dir, "helper.pid") }
func (b Bundle) HelperLog() string  { return filepath.Join(b.Dir, "helper.log") }
func (b Bundle) Lock() string       { return filepath.Join(b.Dir, "lock") }
func (b Bundle) Socket() string     { return filepath.Join(b.Dir, "control.sock") }
func (b Bundle) Exit() string       { return filepath.Join(b.Dir, "exit.json") }
func (b Bundle) Data() string       { return filepath.Join(b.Dir, "data") }

// maxSocketPath is the shortest sun_path of the platforms (darwin: 104,
// with its NUL).
const maxSocketPath = 103

// maxBundleName keeps the control socket's path under maxSocketPath below
// the macOS state directory.
const maxBundleName = 32

// bundleFor is workload's bundle under the driver's bundles directory. A
// long name is cut and given a hash of the whole ID, so it stays distinct.
func bundleFor(dir, workload string) Bundle {
	name := instancefile.Name(workload)
	if len(name) > maxBundleName {
		sum := sha256.Sum256([]byte(workload))
		name = name[:maxBundleName-17] + "-" + hex.EncodeToString(sum[:8])
	}
	return Bundle{Dir: filepath.Join(dir, name)}
}

// Config is bundle.json: what the driver asked of the helper, and what it
// knows of the instance between helpers.
type Config struct {
	Workload  string `json:"workload"`
	Attempt   int64  `json:"attempt"`
	Image     string `json:"image"`
	Guest     Guest  `json:"guest"`
	CPUs      int    `json:"cpus"`
	MemoryMB  int    `json:"memory_mb"`
	DiskBytes int64  `json:"disk_bytes"`
	// ImageDigest is the sha256 of the image the disk was made from.
	ImageDigest string `json:"image_digest,omitempty"`
	// IPSW is the cached restore image, for a macOS guest not yet installed.
	IPSW          string    `json:"ipsw,omitempty"`
	StopRequested bool      `json:"stop_requested,omitempty"`
	Starts        int       `json:"starts"`
	StartedAt     time.Time `json:"started_at,omitzero"`
	// Failed and Detail record a failure before a helper ran.
	Failed protocol.Code `json:"failed,omitempty"`
	Detail string        `json:"detail,omitempty"`
}

func loadConfig(b Bundle) (*Config, error) {
	c, err := instancefile.Load[Config](b.Config())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return nil, errorf(ReasonBundleCorrupt, "bundle %s: %w", filepath.Base(b.Dir), err)
	}
	if c.Workload == "" {
		return nil, errorf(ReasonBundleCorrupt, "bundle %s: bundle.json names no workload", filepath.Base(b.Dir))
	}
	return c, nil
}

func saveConfig(b Bundle, c *Config) error {
	if err := instancefile.Save(b.Config(), c); err != nil {
		return diskErr(err, "bundle "+filepath.Base(b.Dir))
	}
	return nil
}

// ExitRecord is exit.json: how the helper's VM ended.
type ExitRecord struct {
	// Reason is empty when the guest shut down by itself or on request.
	Reason Reason    `json:"reason,omitempty"`
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at"`
}

// ensureIdentity makes the bundle's directory, data directory and MAC
// once; an existing one is kept, so a VM keeps its address for life.
func ensureIdentity(b Bundle) error {
	if err := os.MkdirAll(b.Data(), 0o700); err != nil {
		return diskErr(err, "bundle")
	}
	if _, err := os.Stat(b.MAC()); err == nil {
		return nil
	}
	var m [6]byte
	if _, err := rand.Read(m[:]); err != nil {
		return err
	}
	// Locally administered, unicast: never a vendor's address.
	m[0] = m[0]&^0x01 | 0x02
	mac := fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
	if err := os.WriteFile(b.MAC(), []byte(mac+"\n"), 0o600); err != nil {
		return diskErr(err, "bundle mac")
	}
	return nil
}

// ReadMAC returns the bundle's MAC address.
func ReadMAC(b Bundle) (string, error) {
	s, err := os.ReadFile(b.MAC())
	if err != nil {
		return "", errorf(ReasonBundleCorrupt, "mac: %w", err)
	}
	return strings.TrimSpace(string(s)), nil
}

// diskFile is what makeDisk writes to; tests give one that fills up.
type diskFile interface {
	io.Writer
	Truncate(size int64) error
	Sync() error
	Close() error
	Name() string
}

var createDisk = func(path string) (diskFile, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
}

// makeDisk makes the bundle's disk from the raw image at raw, grown to
// size when the image is smaller. An existing disk is kept: it is the
// VM's state.
func makeDisk(ctx context.Context, b Bundle, raw string, size int64, progress Progress) error {
	if _, err := os.Stat(b.Disk()); err == nil {
		return nil
	}
	src, err := os.Open(raw)
	if err != nil {
		return errorf(ReasonImageFetch, "cached image: %w", err)
	}
	defer src.Close()
	var total int64 = -1
	if st, err := src.Stat(); err == nil {
		total = st.Size()
	}
	tmp := b.Disk() + ".tmp"
	f, err := createDisk(tmp)
	if err != nil {
		return diskErr(err, "disk image")
	}
	defer os.Remove(tmp)
	w := &progressWriter{w: f, total: total, step: "disk", progress: progress}
	if _, err := copyCtx(ctx, w, src); err != nil {
		f.Close()
		if w.writeErr != nil {
			return diskErr(w.writeErr, "disk image")
		}
		return errorf(ReasonImageFetch, "cached image: %w", err)
	}
	if total >= 0 && size > total {
		// Sparse: the space is taken only as the guest writes.
		if err := f.Truncate(size); err != nil {
			f.Close()
			return diskErr(err, "disk image")
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return diskErr(err, "disk image")
	}
	if err := f.Close(); err != nil {
		return diskErr(err, "disk image")
	}
	if err := os.Rename(tmp, b.Disk()); err != nil {
		return diskErr(err, "disk image")
	}
	return nil
}
