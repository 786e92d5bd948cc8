package protocol

import (
	"time"
)

// LogsPath is the agent's upload of a workload's output, asked for in
// SyncResponse.Logs: a POST over mutual TLS whose body is LogLine JSON, one
// per line, for as long as the hub reads it. Telemetry never rides on the
// sync channel: a busy workload's output cannot delay a sync.
const LogsPath = "/agent/v1/logs"

// LogTokenHeader carries LogRequest.Token on the upload.
const LogTokenHeader = "X-Einsora-Log-Token"

// LogRequest asks the agent to upload a workload's output.
type LogRequest struct {
	// Token names this request on the upload; the hub made it and knows
	// which machine and workload it is for.
	Token    string `json:"token"`
	Workload string `json:"workload"`
	// Tail is how many of the kept lines to send first (0: all kept).
	Tail int `json:"tail,omitempty"`
	// Since sends only lines at or after it (zero: all kept).
	Since time.Time `json:"since,omitzero"`
	// Follow keeps the upload open, sending lines as they come, until the
	// hub closes it or the workload is removed.
	Follow bool `json:"follow,omitempty"`
	// URL, when set, is the hub replica that holds the request and waits
	// for the upload (https://HOST:PORT, as CheckHubURL passes): with
	// several replicas the machine's poll may be held by another. The
	// agent uploads there with its usual certificate and pinned CA; empty,
	// it uploads to the hub it syncs with. Agents that predate it ignore
	// it and upload to their hub.
	URL string `json:"url,omitempty"`
}

// LogLine is one line of a workload's output. Line is the workload's own,
// untrusted text.
type LogLine struct {
	Time time.Time `json:"t"`
	// Stream is "stdout", "stderr" or "system" (the agent's or driver's
	// own word).
	Stream string `json:"s"`
	Line   string `json:"l"`
}

// Bounds on log requests.
const (
	// MaxLogRequests bounds SyncResponse.Logs.
	MaxLogRequests = 16
	// MaxLogLineBytes bounds one encoded LogLine on the upload.
	MaxLogLineBytes = 128 << 10
)
