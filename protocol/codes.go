package protocol

// Code is a status code from the fixed vocabulary below. The hub maps each to
// a fixed reason; any other code reads "its machine reported a problem".
type Code string

const (
	CodeStarting    Code = "starting"
	CodeProgressing Code = "progressing"
	CodeRunning     Code = "running"
	CodeStopping    Code = "stopping"
	CodeStopped     Code = "stopped"
	CodeRemoving    Code = "removing"
	CodeRemoved     Code = "removed"
	// CodeExited: the workload ran and exited; ExitCode says how.
	CodeExited Code = "exited"
	// CodeOOMKilled: the workload was killed for using too much memory.
	CodeOOMKilled Code = "oom_killed"
	// CodeFailedStart: the driver could not start the workload.
	CodeFailedStart Code = "failed_start"
	// CodeImageUnavailable: the workload's image cannot be had.
	CodeImageUnavailable Code = "image_unavailable"
	// CodeLost: the attempt was started but its instance is gone.
	CodeLost Code = "lost"
	// CodeDriverUnavailable: the driver is present but not answering.
	CodeDriverUnavailable    Code = "driver_unavailable"
	CodeRefusedDriverMissing Code = "refused_driver_missing"
	CodeRefusedIsolation     Code = "refused_isolation"
	CodeRefusedDriverChange  Code = "refused_driver_change"
	// CodeWaitingGPU: another workload is still active on the GPU it needs.
	CodeWaitingGPU Code = "waiting_gpu"
	// CodeUnlisted: the agent holds the workload, desired state does not
	// list it, so it was stopped and kept.
	CodeUnlisted Code = "unlisted"
)

// Codes is the whole vocabulary.
var Codes = []Code{
	CodeStarting, CodeProgressing, CodeRunning, CodeStopping, CodeStopped,
	CodeRemoving, CodeRemoved, CodeExited, CodeOOMKilled, CodeFailedStart,
	CodeImageUnavailable, CodeLost, CodeDriverUnavailable,
	CodeRefusedDriverMissing, CodeRefusedIsolation, CodeRefusedDriverChange,
	CodeWaitingGPU, CodeUnlisted,
}

// Known reports whether c is in the vocabulary.
func (c Code) Known() bool {
	for _, k := range Codes {
		if c == k {
			return true
		}
	}
	return false
}
