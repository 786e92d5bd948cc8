// Package protocol holds the wire types of the agent protocol: POST
// /agent/v1/sync and POST /agent/v1/enroll. Both the hub and the agent import
// it; it imports nothing of the project. docs/protocol.md is the prose
// description and must change with this file.
package protocol

import "time"

// Version is the protocol version an agent speaks. A hub answers agents of
// the versions it knows; the field is carried on every request.
const Version = 1

// SyncPath is the HTTP path of the one call, Sync.
const SyncPath = "/agent/v1/sync"

// Limits on what an agent may send. The hub refuses a request over
// MaxSyncBody and truncates text over MaxDetail: reported text is bounded and
// never shown to users.
const (
	MaxSyncBody   = 1 << 20
	MaxStatuses   = 4096
	MaxDetail     = 512
	MaxIDLength   = 128
	MaxVersionLen = 64
)

// Mode is what desired state asks of one workload on the machine.
type Mode string

const (
	// ModeRun asks the agent to have the workload's attempt running.
	ModeRun Mode = "run"
	// ModePark asks the agent to stop the workload and keep its data.
	ModePark Mode = "park"
	// ModeRemove asks the agent to delete the workload and its data. It is
	// the only mode under which an agent deletes data.
	ModeRemove Mode = "remove"
)

// Valid reports whether m is one of the three modes.
func (m Mode) Valid() bool { return m == ModeRun || m == ModePark || m == ModeRemove }

// Kind is what sort of workload it is.
type Kind string

const (
	KindContainer Kind = "container"
	KindVM        Kind = "vm"
	KindNotebook  Kind = "notebook"
	KindEndpoint  Kind = "endpoint"
)

// Kinds lists every kind, in a stable order.
var Kinds = []Kind{KindContainer, KindVM, KindNotebook, KindEndpoint}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	for _, known := range Kinds {
		if k == known {
			return true
		}
	}
	return false
}

// SyncRequest is what an agent sends: what it has, and the generation of
// desired state it last received.
type SyncRequest struct {
	// ProtocolVersion is Version as the agent knows it.
	ProtocolVersion int `json:"protocol_version"`
	// AgentVersion is the agent's build version, for display only.
	AgentVersion string `json:"agent_version"`
	// StoreID is the store ID of the desired state the agent holds; empty
	// before its first desired state.
	StoreID string `json:"store_id,omitempty"`
	// Generation is the generation of the latest desired state the agent
	// received. The hub answers at once when it differs from the machine's
	// current generation and otherwise holds the request (the long poll).
	Generation int64 `json:"generation"`
	// AppliedGeneration is the generation the agent's apply loop last
	// finished a pass for. It makes drift visible; it decides nothing.
	AppliedGeneration int64 `json:"applied_generation"`
	// BootID identifies the host's boot, and AgentStarted the agent
	// process's start, so the hub can tell a reboot from a partition.
	BootID       string    `json:"boot_id,omitempty"`
	AgentStarted time.Time `json:"agent_started"`
	// PreviousStoreID is set when the agent saw the store ID change: a
	// replaced or restored hub database. The agent kept everything.
	PreviousStoreID string `json:"previous_store_id,omitempty"`
	// Statuses holds one entry per workload the agent holds or was told of.
	Statuses []Status `json:"statuses"`
	// Inventory is sent on the first sync and whenever it changed.
	Inventory *Inventory `json:"inventory,omitempty"`
	// HubsDigest is HubsDigest of the replica URLs the agent learned
	// last (empty before any): the hub sends its list again only when it
	// differs, so an idle poll carries no list.
	HubsDigest string `json:"hubs_digest,omitempty"`
}

// Status is the agent's word on one workload.
type Status struct {
	Workload string `json:"workload"`
	Attempt  int64  `json:"attempt"`
	// Mode is the mode the agent applied; empty for a workload it holds
	// but was not told of.
	Mode Mode `json:"mode,omitempty"`
	// Generation is the desired-state generation this status was applied
	// from. A status older than the generation that last changed the
	// workload's mode is read as still in progress.
	Generation int64 `json:"generation"`
	Code       Code  `json:"code"`
	// ExitCode is set with CodeExited.
	ExitCode *int `json:"exit_code,omitempty"`
	// Detail is bounded free text for operators' logs. It is never shown
	// to users and decides nothing.
	Detail string `json:"detail,omitempty"`
	// Restarts counts the times the agent restarted this attempt under
	// its restart policy. It only grows within an attempt, so a hub that
	// sees it rise notes one timeline event per step; it resets with a
	// new attempt.
	Restarts int `json:"restarts,omitempty"`
}

// SyncResponse is the hub's answer: the machine's complete desired state, or
// word that nothing changed since the generation the agent holds.
type SyncResponse struct {
	// ProtocolVersion is Version as the hub knows it, set on answers over
	// HTTPS; zero from hubs older than the field, which speak version 1.
	// An agent refuses an answer from a hub older than itself.
	ProtocolVersion int `json:"protocol_version,omitempty"`
	// StoreID is made when the hub's store is created. An agent that sees
	// it change keeps everything it holds that is no longer listed.
	StoreID string `json:"store_id"`
	// Generation is the machine's current desired generation.
	Generation int64 `json:"generation"`
	// Unchanged is true when the poll timed out with nothing new; then
	// Workloads is empty and means nothing.
	Unchanged bool `json:"unchanged,omitempty"`
	// Workloads is the complete desired state: every workload placed on
	// the machine, with its mode.
	Workloads []DesiredWorkload `json:"workloads"`
	// Logs asks the agent to upload workloads' output, each over its own
	// POST to LogsPath; it rides beside desired state, not inside it, and
	// an agent starts each token once.
	Logs []LogRequest `json:"logs,omitempty"`
	// Reconnect, when set, directs the agent to redial at once, to URL if
	// it is not empty (a draining hub).
	Reconnect *Reconnect `json:"reconnect,omitempty"`
	// ReconnectWindowMS is the window, in milliseconds, that the hub
	// sized to its fleet for agents to come back over after it restarts
	// or drains to its own address: an agent that loses the hub, or is told
	// to redial it, waits a uniformly random part of it first, so the
	// fleet's handshakes spread out and each agent comes back once. Zero
	// from hubs older than the field. A directed reconnect to another URL
	// stays immediate.
	ReconnectWindowMS int64 `json:"reconnect_window_ms,omitempty"`
	// Hubs are the agents' URLs of the hub's live replicas, the answering
	// one first, when they differ from the set named by the request's
	// HubsDigest; omitted otherwise, and when the hub knows none. It may
	// ride on an Unchanged answer. An agent fails over among them after
	// the replicas given on its command line (see KeepHubs for what it
	// keeps).
	Hubs []string `json:"hubs,omitempty"`
	// HubTime is the hub's clock when it answered, so an agent can warn
	// about a skewed clock.
	HubTime time.Time `json:"hub_time"`
}

// Reconnect is a directed reconnect.
type Reconnect struct {
	URL string `json:"url,omitempty"`
}

// DesiredWorkload is one workload of desired state.
type DesiredWorkload struct {
	ID      string `json:"id"`
	Attempt int64  `json:"attempt"`
	Mode    Mode   `json:"mode"`
	Kind    Kind   `json:"kind"`
	// Driver is the driver the hub placed the workload on.
	Driver string `json:"driver"`
	// Isolation is the least isolation the workload needs, from the hub's
	// driver table; an agent whose driver gives less refuses it.
	Isolation Isolation `json:"isolation"`
	Image     string    `json:"image,omitempty"`
	Resources Resources `json:"resources"`
	// WorkloadSpec's fields (command, env, secret_env, ports, workdir,
	// volumes, restart) sit here on the wire, all optional. The agent
	// refuses, as failed_start, a workload whose spec fails Validate.
	WorkloadSpec
}

// Resources is what a workload's class reserves.
type Resources struct {
	CPUs     int `json:"cpus"`
	MemoryMB int `json:"memory_mb"`
	// Devices names the devices reserved, e.g. "apple-gpu:0" or
	// "nvidia:GPU-8a1f…". Two active workloads never share one.
	Devices []string `json:"devices,omitempty"`
}

// Isolation orders how strongly a driver separates a workload from its host.
type Isolation int

const (
	IsolationProcess Isolation = iota + 1
	IsolationContainer
	IsolationSandbox
	IsolationVM
)

var isolationNames = map[Isolation]string{
	IsolationProcess:   "process",
	IsolationContainer: "container",
	IsolationSandbox:   "sandbox",
	IsolationVM:        "vm",
}

func (i Isolation) String() string {
	if s, ok := isolationNames[i]; ok {
		return s
	}
	return "unknown"
}
