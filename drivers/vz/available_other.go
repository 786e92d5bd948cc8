//go:build !(darwin && arm64 && cgo)

package vz

import (
	"errors"
	"runtime"
)

// Available reports whether this build has the shim over
// Virtualization.framework.
const Available = false

// NewHypervisor returns the platform's hypervisor; this build has none.
func NewHypervisor() (Hypervisor, error) {
	return nil, errors.New("vz: this build has no Virtualization.framework support (" + runtime.GOOS + ", or built without cgo): use a darwin build with cgo")
}
