package vz

import "context"

// Hypervisor makes VMs. The helper consumes it; shim_darwin.go implements
// it over Virtualization.framework, and tests give a fake.
type Hypervisor interface {
	// InstallMacOS restores macOS from the IPSW at ipsw into the bundle:
	// the disk (made at cfg.DiskBytes), the aux storage, hardware model
	// and machine identifier. progress gets 0..100.
	InstallMacOS(ctx context.Context, b Bundle, cfg *Config, ipsw string, progress func(pct int)) error
	// Boot starts the bundle's VM. An OS refusal for too many VMs wraps
	// ErrLimitExceeded.
	Boot(ctx context.Context, b Bundle, cfg *Config) (Machine, error)
}

// Machine is one running VM.
type Machine interface {
	// RequestStop asks the guest to shut down (ACPI power button).
	RequestStop() error
	// ForceStop stops the VM at once.
	ForceStop() error
	// Done is closed once the VM has stopped.
	Done() <-chan struct{}
	// Err, after Done, is nil when the guest shut down (by itself or on
	// request), else the error the VM stopped with.
	Err() error
}
