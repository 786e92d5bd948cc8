package main

import (
	"testing"
	"time"

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
