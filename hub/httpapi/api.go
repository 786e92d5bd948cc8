// Package httpapi is the hub's HTTP surface: the admin API, the agents'
// sync, enrolment and renewal endpoints, the strict decoders of their
// bodies, and the one mapping of the hub's errors to status codes. It
// reaches the hub only through the Hub interface below.
package httpapi

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Hub is what the handlers ask of the hub. *hub.Hub implements it.
type Hub interface {
	// The agents' calls.
	Sync(ctx context.Context, machineID string, req *protocol.SyncRequest) (*protocol.SyncResponse, error)
	Enroll(ctx context.Context, req *hub.EnrollRequest) (*protocol.CertificateResponse, error)
	Renew(ctx context.Context, machineID string, csr *x509.CertificateRequest) (*protocol.CertificateResponse, error)

	// The operators' calls.
	Tenants(ctx context.Context) ([]store.Tenant, error)
	CreateTenant(ctx context.Context, name string) error
	Classes(ctx context.Context) ([]store.Class, error)
	CreateClass(ctx context.Context, c store.Class) error
	Machines(ctx context.Context) ([]hub.MachineView, error)
	Machine(ctx context.Context, id string) (hub.MachineView, error)
	RevokeMachine(ctx context.Context, id string) error
	ReplaceMachine(ctx context.Context, id string) error
	RevokeCertificate(ctx context.Context, machineID, serial string) error
	CheckCertificate(ctx context.Context, machineID, serial string) error
	RemoveMachine(ctx context.Context, id string) error
	CreateEnrollToken(ctx context.Context, owner, region string, ttl time.Duration) (protocol.Token, time.Time, error)
	Workloads(ctx context.Context) ([]store.Workload, error)
	Workload(ctx context.Context, id string) (store.Workload, error)
	CreateWorkload(ctx context.Context, spec hub.WorkloadSpec) (store.Workload, error)
	CreateWorkloads(ctx context.Context, specs []hub.WorkloadSpec) ([]store.Workload, error)
	RunWorkload(ctx context.Context, id string) error
	ParkWorkload(ctx context.Context, id string) error
	DeleteWorkload(ctx context.Context, id string) error
	Timeline(ctx context.Context, id string) ([]store.TimelineEntry, error)
	Counters() hub.Counters
	WaitingPolls() int
	// UnledWarning is one line when no hub leads region now, else "".
	UnledWarning(ctx context.Context, region string) string
	// Workloads' output (hub/logs.go).
	WorkloadLogs(ctx context.Context, id string, o hub.LogOptions, emit func(protocol.LogLine) error) error
	AcceptLogs(ctx context.Context, machineID, token string, body io.Reader) error
}

var _ Hub = (*hub.Hub)(nil)

// API serves a hub over HTTP.
type API struct {
	hub Hub
	clk clock.Clock
	log *slog.Logger
	// ReconnectWindow, when set, is the window each sync answer tells
	// agents to spread their return over (protocol.SyncResponse).
	ReconnectWindow func() time.Duration
}

// New returns the HTTP surface of h. A nil clock is the real one, a nil
// logger the default.
func New(h Hub, clk clock.Clock, log *slog.Logger) *API {
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = slog.Default()
	}
	return &API{hub: h, clk: clk, log: log.With("component", "hub-api")}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, adminapi.Error{Error: msg})
}
