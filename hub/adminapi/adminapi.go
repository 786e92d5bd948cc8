// Package adminapi holds the admin API's JSON types and its client, which
// the einsora-hub CLI uses. Field names are the ones CONTRACT.md promises to
// scripts: add fields freely, rename none.
package adminapi

import (
	"time"

	"einsora.dev/edge/protocol"
)

// Tenant is a tenant.
type Tenant struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

// Class is a size of workload.
type Class struct {
	Name        string `json:"name"`
	Accelerator string `json:"accelerator"`
	Devices     int    `json:"devices"`
	CPUs        int    `json:"cpus"`
	MemoryMB    int    `json:"memory_mb"`
}

// Machine is a machine and its health.
type Machine struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Owner  string `json:"owner"`
	Region string `json:"region"`
	// Online is never true for a revoked machine.
	Online bool `json:"online"`
	// OfflineSince is when an offline machine went silent.
	OfflineSince *time.Time `json:"offline_since,omitempty"`
	Revoked      bool       `json:"revoked"`
	RevokedAt    *time.Time `json:"revoked_at,omitempty"`
	// Sim is true when the machine offers the sim driver, which runs
	// nothing.
	Sim               bool                `json:"sim"`
	LastSync          *time.Time          `json:"last_sync"`
	DesiredGeneration int64               `json:"desired_generation"`
	AppliedGeneration int64               `json:"applied_generation"`
	AgentVersion      string              `json:"agent_version"`
	OS                string              `json:"os,omitempty"`
	Arch              string              `json:"arch,omitempty"`
	Inventory         *protocol.Inventory `json:"inventory,omitempty"`
	Drivers           []string            `json:"drivers,omitempty"`
	CertExpires       *time.Time          `json:"cert_expires"`
	Certificates      []Certificate       `json:"certificates,omitempty"`
}

// Workload is a workload and where it stands.
type Workload struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Tenant  string    `json:"tenant"`
	Kind    string    `json:"kind"`
	Class   string    `json:"class"`
	Region  string    `json:"region"`
	Image   string    `json:"image"`
	State   string    `json:"state"`
	Machine string    `json:"machine"`
	Driver  string    `json:"driver"`
	Attempt int64     `json:"attempt"`
	Reason  string    `json:"reason"`
	Created time.Time `json:"created"`
	Since   time.Time `json:"since"`
	// UnknownSince is set when the workload's machine is offline or
	// revoked: State is then only what the machine last reported, and
	// what it does now is unknown since this time.
	UnknownSince *time.Time `json:"unknown_since,omitempty"`
	// Warning, on creation only, is set when no hub leads Region now:
	// the workload stays pending until one does.
	Warning string `json:"warning,omitempty"`
	// The spec's fields (command, env, secret_env, ports, workdir,
	// volumes, restart) sit here, secret values always "(secret)".
	protocol.WorkloadSpec
}

// TimelineEntry is one line of a workload's history.
type TimelineEntry struct {
	At   time.Time `json:"at"`
	Text string    `json:"text"`
}

// CreateTenant is the body of POST /v1/tenants.
type CreateTenant struct {
	Name string `json:"name"`
}

// CreateWorkload is the body of POST /v1/workloads.
type CreateWorkload struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Class  string `json:"class"`
	Region string `json:"region"`
	Image  string `json:"image,omitempty"`
	// The spec's fields, as on the agents' wire; secret_env values are
	// sealed in the store and never shown again.
	protocol.WorkloadSpec
}

// CreateWorkloads is the body of POST /v1/workloads/batch: up to 1,000
// workloads created in one transaction, all or none.
type CreateWorkloads struct {
	Workloads []CreateWorkload `json:"workloads"`
}

// CreatedWorkloads answers POST /v1/workloads/batch: the workloads in the
// order asked, and a warning when a region named has no leader.
type CreatedWorkloads struct {
	Workloads []Workload `json:"workloads"`
	Warning   string     `json:"warning,omitempty"`
}

// Error is the body of every error answer.
type Error struct {
	Error string `json:"error"`
}
