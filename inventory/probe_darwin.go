package inventory

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// platformProbers on macOS read sysctl values, recorded when rec is set.
func platformProbers(rec recorder) []prober {
	if rec != nil {
		return darwinProbers(recordingSysctl{unixSysctl{}, rec})
	}
	return darwinProbers(unixSysctl{})
}

// unixSysctl reads the kernel's sysctl values without cgo.
type unixSysctl struct{}

func (unixSysctl) String(name string) (string, error) { return unix.Sysctl(name) }

// Uint reads an integer of either width: the hw.perflevel and kern values
// are 4 bytes, hw.memsize 8.
func (unixSysctl) Uint(name string) (uint64, error) {
	b, err := unix.SysctlRaw(name)
	if err != nil {
		return 0, err
	}
	switch len(b) {
	case 4:
		return uint64(binary.NativeEndian.Uint32(b)), nil
	case 8:
		return binary.NativeEndian.Uint64(b), nil
	}
	return 0, fmt.Errorf("sysctl %s: %d bytes, want 4 or 8", name, len(b))
}

// recordingSysctl records every sysctl value read.
type recordingSysctl struct {
	sys sysctler
	rec recorder
}

func (r recordingSysctl) String(name string) (string, error) {
	v, err := r.sys.String(name)
	r.rec.record("sysctl/"+name, []byte(v), err)
	return v, err
}

func (r recordingSysctl) Uint(name string) (uint64, error) {
	v, err := r.sys.Uint(name)
	r.rec.record("sysctl/"+name, fmt.Appendf(nil, "%d", v), err)
	return v, err
}
