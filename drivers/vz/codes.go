package vz

import (
	"errors"
	"fmt"

	"einsora.dev/edge/protocol"
)

// Reason is a fixed code for what went wrong, finer than protocol.Code. It
// begins an instance's Detail and is the "code" of the log line, so an
// operator can grep for it.
type Reason string

const (
	// ReasonImageInvalid: the image string cannot be parsed.
	ReasonImageInvalid Reason = "vz_image_invalid"
	// ReasonImageFetch: the image's URL or path cannot be read.
	ReasonImageFetch Reason = "vz_image_fetch_failed"
	// ReasonDigestMismatch: the image's bytes do not have the pinned digest.
	ReasonDigestMismatch Reason = "vz_image_digest_mismatch"
	// ReasonDiskFull: no space left while fetching or making the disk.
	ReasonDiskFull Reason = "vz_disk_full"
	// ReasonBundleCorrupt: a bundle's files cannot be read.
	ReasonBundleCorrupt Reason = "vz_bundle_corrupt"
	// ReasonHelperFailed: the helper process could not be started or
	// ended before it answered.
	ReasonHelperFailed Reason = "vz_helper_failed"
	// ReasonHelperLost: the helper died without recording why (killed).
	ReasonHelperLost Reason = "vz_helper_lost"
	// ReasonHelperUnresponsive: the helper holds its bundle but its
	// control socket does not answer in time.
	ReasonHelperUnresponsive Reason = "vz_helper_unresponsive"
	// ReasonControlGarbage: the control socket answered something that is
	// not the protocol.
	ReasonControlGarbage Reason = "vz_control_garbage"
	// ReasonVMLimit: the OS refused another macOS guest
	// (VZErrorVirtualMachineLimitExceeded) or two are already running.
	// Retryable: a later Start tries again.
	ReasonVMLimit Reason = "vz_vm_limit"
	// ReasonBootFailed: the hypervisor refused the configuration or the
	// guest would not start.
	ReasonBootFailed Reason = "vz_boot_failed"
	// ReasonInstallFailed: restoring macOS from the IPSW failed.
	ReasonInstallFailed Reason = "vz_install_failed"
	// ReasonVMError: the running VM stopped with an error.
	ReasonVMError Reason = "vz_vm_error"
)

// Error is a failure with its fixed reason.
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

func errorf(r Reason, format string, a ...any) error {
	return &Error{Reason: r, Err: fmt.Errorf(format, a...)}
}

// reasonOf returns err's reason, or def when it has none.
func reasonOf(err error, def Reason) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return def
}

// protocolCode maps a reason to the code the hub sees.
func protocolCode(r Reason) protocol.Code {
	switch r {
	case ReasonImageInvalid, ReasonImageFetch, ReasonDigestMismatch:
		return protocol.CodeImageUnavailable
	}
	return protocol.CodeFailedStart
}

// ErrLimitExceeded is returned by a Hypervisor when the OS refuses another
// VM (VZErrorVirtualMachineLimitExceeded).
var ErrLimitExceeded = errors.New("virtual machine limit exceeded")
