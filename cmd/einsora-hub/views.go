package main

import (
	"fmt"
	"io"
	"time"

	"einsora.dev/edge/hub/adminapi"
)

// machineState is online, offline or revoked; a revoked machine is never
// shown online.
func machineState(m adminapi.Machine) string {
	switch {
	case m.Revoked:
		return "revoked"
	case m.Online:
		return "online"
	}
	return "offline"
}

// simMark flags machines that offer the sim driver, which runs nothing.
func simMark(m adminapi.Machine) string {
	if m.Sim {
		return "SIM"
	}
	return ""
}

func certExpiry(m adminapi.Machine) string {
	if m.CertExpires == nil {
		return "-"
	}
	return m.CertExpires.Format(time.RFC3339)
}

// workloadState is the stored state, or, when the workload's machine is
// offline, that it is unknown since the machine went silent: a stored
// "running" then is only what the machine last said.
func workloadState(w adminapi.Workload) string {
	if w.UnknownSince != nil {
		return fmt.Sprintf("unknown (machine offline since %s)", w.UnknownSince.Format(time.RFC3339))
	}
	return w.State
}

// warn prints the hub's warning, if any, as one line on stderr.
func warn(cmd interface{ ErrOrStderr() io.Writer }, warning string) {
	if warning != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", warning)
	}
}
