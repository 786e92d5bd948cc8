package hub

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// maxAdminBody bounds admin request bodies; none needs more.
const maxAdminBody = 64 << 10

// AdminHandler serves the admin API, authenticated by token.
func (h *Hub) AdminHandler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tenants", h.adminListTenants)
	mux.HandleFunc("POST /v1/tenants", h.adminCreateTenant)
	mux.HandleFunc("GET /v1/classes", h.adminListClasses)
	mux.HandleFunc("POST /v1/classes", h.adminCreateClass)
	mux.HandleFunc("GET /v1/machines", h.adminListMachines)
	mux.HandleFunc("GET /v1/machines/{id}", h.adminShowMachine)
	mux.HandleFunc("POST /v1/machines/{id}/revoke", h.adminAct(h.RevokeMachine))
	mux.HandleFunc("DELETE /v1/machines/{id}", h.adminAct(h.RemoveMachine))
	mux.HandleFunc("POST /v1/tokens", h.adminCreateToken)
	mux.HandleFunc("GET /v1/workloads", h.adminListWorkloads)
	mux.HandleFunc("POST /v1/workloads", h.adminCreateWorkload)
	mux.HandleFunc("GET /v1/workloads/{id}", h.adminShowWorkload)
	mux.HandleFunc("DELETE /v1/workloads/{id}", h.adminAct(h.DeleteWorkload))
	mux.HandleFunc("POST /v1/workloads/{id}/run", h.adminAct(h.RunWorkload))
	mux.HandleFunc("POST /v1/workloads/{id}/park", h.adminAct(h.ParkWorkload))
	mux.HandleFunc("GET /v1/workloads/{id}/timeline", h.adminTimeline)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		if subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+token)) != 1 {
			writeError(w, http.StatusUnauthorized, "missing or wrong admin token; it is in the hub's data directory (admin-token), or set EINSORA_ADMIN_TOKEN")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxAdminBody)
		mux.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, adminapi.Error{Error: msg})
}

// writeErr maps an error to its status: the operator's mistakes are 4xx
// with the error's own words, the hub's are 500 and logged.
func (h *Hub) writeErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, store.ErrExists):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
	default:
		h.log.Error("admin request failed", "err", err)
		writeError(w, http.StatusInternalServerError, "the hub failed: "+err.Error())
	}
}

// decode reads a JSON body strictly: unknown fields, trailing data and
// oversized bodies are the caller's mistake.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("%w: request body over %d bytes", ErrInvalid, tooBig.Limit)
		}
		return fmt.Errorf("%w: request body: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: request body: trailing data after the JSON object", ErrInvalid)
	}
	return nil
}

func (h *Hub) adminListTenants(w http.ResponseWriter, r *http.Request) {
	ts, err := h.Tenants(r.Context())
	if err != nil {
		h.writeErr(w, err)
		return
	}
	out := make([]adminapi.Tenant, len(ts))
	for i, t := range ts {
		out[i] = adminapi.Tenant{Name: t.Name, Created: t.Created}
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Hub) adminCreateTenant(w http.ResponseWriter, r *http.Request) {
	var in adminapi.CreateTenant
	if err := decode(r, &in); err != nil {
		h.writeErr(w, err)
		return
	}
	if err := h.CreateTenant(r.Context(), in.Name); err != nil {
		h.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, adminapi.Tenant{Name: in.Name, Created: h.clk.Now()})
}

func (h *Hub) adminListClasses(w http.ResponseWriter, r *http.Request) {
	cs, err := h.Classes(r.Context())
	if err != nil {
		h.writeErr(w, err)
		return
	}
	out := make([]adminapi.Class, len(cs))
	for i, c := range cs {
		out[i] = adminapi.Class(c)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Hub) adminCreateClass(w http.ResponseWriter, r *http.Request) {
	var in adminapi.Class
	if err := decode(r, &in); err != nil {
		h.writeErr(w, err)
		return
	}
	if err := h.CreateClass(r.Context(), store.Class(in)); err != nil {
		h.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, in)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func machineOut(m MachineView, full bool) adminapi.Machine {
	out := adminapi.Machine{
		ID: m.ID, Name: m.Name, Owner: m.Owner, Region: m.Region, Online: m.Online, LastSync: timePtr(m.LastSync),
		DesiredGeneration: m.Generation, AppliedGeneration: m.AppliedGeneration, AgentVersion: m.AgentVersion,
	}
	if full {
		out.OS, out.Arch, out.Inventory, out.CertExpires = m.OS, m.Arch, m.Inventory, timePtr(m.CertExpires)
		if m.Inventory != nil {
			out.Drivers = m.Inventory.Drivers
		}
	}
	return out
}

func (h *Hub) adminListMachines(w http.ResponseWriter, r *http.Request) {
	ms, err := h.Machines(r.Context())
	if err != nil {
		h.writeErr(w, err)
		return
	}
	out := make([]adminapi.Machine, len(ms))
	for i, m := range ms {
		out[i] = machineOut(m, false)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Hub) adminShowMachine(w http.ResponseWriter, r *http.Request) {
	m, err := h.Machine(r.Context(), r.PathValue("id"))
	if err != nil {
		h.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, machineOut(m, true))
}

func workloadOut(w store.Workload) adminapi.Workload {
	return adminapi.Workload{
		ID: w.ID, Name: w.Name, Tenant: w.Tenant, Kind: string(w.Kind), Class: w.Class, Region: w.Region,
		Image: w.Image, State: string(w.State), Machine: w.Machine, Driver: w.Driver, Attempt: w.Attempt,
		Reason: w.Reason, Created: w.Created, Since: w.Since,
	}
}

func (h *Hub) adminListWorkloads(w http.ResponseWriter, r *http.Request) {
	ws, err := h.Workloads(r.Context())
	if err != nil {
		h.writeErr(w, err)
		return
	}
	out := make([]adminapi.Workload, len(ws))
	for i, wl := range ws {
		out[i] = workloadOut(wl)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Hub) adminCreateWorkload(w http.ResponseWriter, r *http.Request) {
	var in adminapi.CreateWorkload
	if err := decode(r, &in); err != nil {
		h.writeErr(w, err)
		return
	}
	wl, err := h.CreateWorkload(r.Context(), WorkloadSpec{
		Tenant: in.Tenant, Name: in.Name, Kind: protocol.Kind(in.Kind), Class: in.Class, Region: in.Region, Image: in.Image,
	})
	if err != nil {
		h.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, workloadOut(wl))
}

func (h *Hub) adminShowWorkload(w http.ResponseWriter, r *http.Request) {
	wl, err := h.Workload(r.Context(), r.PathValue("id"))
	if err != nil {
		h.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, workloadOut(wl))
}

func (h *Hub) adminAct(act func(ctx context.Context, id string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := act(r.Context(), r.PathValue("id")); err != nil {
			h.writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func (h *Hub) adminTimeline(w http.ResponseWriter, r *http.Request) {
	es, err := h.Timeline(r.Context(), r.PathValue("id"))
	if err != nil {
		h.writeErr(w, err)
		return
	}
	out := make([]adminapi.TimelineEntry, len(es))
	for i, e := range es {
		out[i] = adminapi.TimelineEntry{At: e.At, Text: e.Text}
	}
	writeJSON(w, http.StatusOK, out)
}

// SyncHandler serves POST /agent/v1/sync. identify names the machine from
// the request: its verified client certificate over HTTPS.
func (h *Hub) SyncHandler(identify func(*http.Request) (string, error)) http.Handler {
	return machineHandler(identify, func(w http.ResponseWriter, r *http.Request, machineID string) {
		req, err := DecodeSyncRequest(http.MaxBytesReader(w, r.Body, protocol.MaxSyncBody))
		if err != nil {
			writeDecodeError(w, err)
			return
		}
		resp, err := h.Sync(r.Context(), machineID, req)
		switch {
		case errors.Is(err, ErrBadRequest):
			writeError(w, http.StatusBadRequest, err.Error())
		case errors.Is(err, ErrRevoked):
			writeError(w, http.StatusForbidden, err.Error()+"; an operator revoked this machine: delete the machine-id file in the agent's state directory and enrol it as a new machine")
		case errors.Is(err, ErrUnknownMachine):
			writeError(w, http.StatusForbidden, err.Error()+"; enrol the machine again with: einsora-agent enroll")
		case errors.Is(err, ErrSuperseded):
			writeError(w, http.StatusConflict, err.Error())
		case r.Context().Err() != nil:
			// The agent went away or cut its poll short: nothing to answer.
		case err != nil:
			h.log.Error("sync failed", "machine", machineID, "err", err)
			writeError(w, http.StatusInternalServerError, "the hub failed to sync; the agent will retry")
		default:
			out := *resp // a copy: resp may be the cached desired state
			out.ProtocolVersion = protocol.Version
			writeJSON(w, http.StatusOK, &out)
		}
	})
}

// machineHandler serves POSTs of the machine that identify names (from its
// client certificate), refusing other methods and unidentified callers.
func machineHandler(identify func(*http.Request) (string, error), serve func(w http.ResponseWriter, r *http.Request, machineID string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "use POST")
			return
		}
		machineID, err := identify(r)
		if err != nil {
			writeError(w, http.StatusUnauthorized, err.Error())
			return
		}
		serve(w, r, machineID)
	})
}

// DecodeSyncRequest reads and checks a sync request. Unknown fields are
// ignored, so a newer agent may add optional ones; trailing data is refused.
// It is the decoder of untrusted input that FuzzDecodeSyncRequest exercises.
func DecodeSyncRequest(r io.Reader) (*protocol.SyncRequest, error) {
	var req protocol.SyncRequest
	dec := json.NewDecoder(r)
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("decode sync request: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("decode sync request: trailing data after the JSON object")
	}
	if err := checkRequest(&req); err != nil {
		return nil, fmt.Errorf("sync request: %w", err)
	}
	return &req, nil
}
