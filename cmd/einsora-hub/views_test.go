package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"einsora.dev/edge/hub/adminapi"
)

func TestWorkloadStateNeverClaimsRunningOffline(t *testing.T) {
	since := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	if got := workloadState(adminapi.Workload{State: "running"}); got != "running" {
		t.Errorf("online: got %q", got)
	}
	got := workloadState(adminapi.Workload{State: "running", UnknownSince: &since})
	if want := "unknown (machine offline since 2026-11-29T10:00:00Z)"; got != want {
		t.Errorf("offline: got %q, want %q", got, want)
	}
	if got := machineState(adminapi.Machine{Online: true, Revoked: true}); got != "revoked" {
		t.Errorf("revoked: got %q", got)
	}
	if simMark(adminapi.Machine{Sim: true}) != "SIM" || simMark(adminapi.Machine{}) != "" {
		t.Error("sim marker wrong")
	}
}

func TestWarnIsOneLineOnStderr(t *testing.T) {
	var out, errb bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	warn(cmd, "")
	if errb.Len() != 0 {
		t.Errorf("no warning printed %q", errb.String())
	}
	warn(cmd, "no hub leads region asia now")
	if got := errb.String(); got != "warning: no hub leads region asia now\n" || out.Len() != 0 {
		t.Errorf("got stderr %q, stdout %q", got, out.String())
	}
}
