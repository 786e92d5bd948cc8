package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// maxAdminBody bounds admin request bodies but a batch's; none needs more.
const maxAdminBody = 64 << 10

// batchPath is the one admin path whose body may exceed maxAdminBody.
const batchPath = "/v1/workloads/batch"

// adminTimeout bounds each admin request: a hub whose store does not
// answer (a replica cut off from it) answers 503 instead of hanging. A
// variable for the tests.
var adminTimeout = 30 * time.Second

// AdminHandler serves the admin API, authenticated by token.
func (a *API) AdminHandler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tenants", a.listTenants)
	mux.HandleFunc("POST /v1/tenants", a.createTenant)
	mux.HandleFunc("GET /v1/classes", a.listClasses)
	mux.HandleFunc("POST /v1/classes", a.createClass)
	mux.HandleFunc("GET /v1/machines", a.listMachines)
	mux.HandleFunc("GET /v1/machines/{id}", a.showMachine)
	mux.HandleFunc("POST /v1/machines/{id}/revoke", a.revokeMachine)
	mux.HandleFunc("POST /v1/machines/{id}/replace", a.act(a.hub.ReplaceMachine))
	mux.HandleFunc("POST /v1/certificates/{serial}/revoke", a.revokeCertificate)
	mux.HandleFunc("GET /v1/counters", a.counters)
	mux.HandleFunc("DELETE /v1/machines/{id}", a.act(a.hub.RemoveMachine))
	mux.HandleFunc("POST /v1/tokens", a.createToken)
	mux.HandleFunc("GET /v1/workloads", a.listWorkloads)
	mux.HandleFunc("POST /v1/workloads", a.createWorkload)
	mux.HandleFunc("POST "+batchPath, a.createWorkloads)
	mux.HandleFunc("GET /v1/workloads/{id}", a.showWorkload)
	mux.HandleFunc("DELETE /v1/workloads/{id}", a.act(a.hub.DeleteWorkload))
	mux.HandleFunc("POST /v1/workloads/{id}/run", a.act(a.hub.RunWorkload))
	mux.HandleFunc("POST /v1/workloads/{id}/park", a.act(a.hub.ParkWorkload))
	mux.HandleFunc("GET /v1/workloads/{id}/timeline", a.timeline)
	mux.HandleFunc("GET /v1/workloads/{id}/logs", a.workloadLogs)
	// Go's profiles of the hub, for its operators: behind the admin
	// token like every other route here.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		if subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+token)) != 1 {
			writeError(w, http.StatusUnauthorized, "missing or wrong admin token; it is in the hub's data directory (admin-token), or set EINSORA_ADMIN_TOKEN")
			return
		}
		limit := int64(maxAdminBody)
		if r.URL.Path == batchPath {
			limit = adminapi.MaxBatchBody
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		ctx, cancel := context.WithTimeoutCause(r.Context(), adminTimeout, errAdminTimeout)
		defer cancel()
		mux.ServeHTTP(w, r.WithContext(ctx))
	})
}

var errAdminTimeout = errors.New("admin request timed out")

// adminFail answers an admin request's error. The hub's own failures are
// logged whole and answered in general words: a store's error can name
// its user, database and address, which are not the caller's to read.
func (a *API) adminFail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(context.Cause(r.Context()), errAdminTimeout) {
		a.log.Error("admin request timed out", "method", r.Method, "path", r.URL.Path, "timeout", adminTimeout, "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("the hub did not answer within %v (is its store reachable?); its log says why; try again or another replica with --hub", adminTimeout))
		return
	}
	a.fail(w, r.Context(), err, "admin request failed", "the hub failed; its log says why")
}

func (a *API) listTenants(w http.ResponseWriter, r *http.Request) {
	ts, err := a.hub.Tenants(r.Context())
	if err != nil {
		a.adminFail(w, r, err)
		return
	}
	out := make([]adminapi.Tenant, len(ts))
	for i, t := range ts {
		out[i] = adminapi.Tenant{Name: t.Name, Created: t.Created}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) createTenant(w http.ResponseWriter, r *http.Request) {
	var in adminapi.CreateTenant
	if err := decodeAdmin(r, &in); err != nil {
		a.adminFail(w, r, err)
		return
	}
	if err := a.hub.CreateTenant(r.Context(), in.Name); err != nil {
		a.adminFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, adminapi.Tenant{Name: in.Name, Created: a.clk.Now()})
}

func (a *API) listClasses(w http.ResponseWriter, r *http.Request) {
	cs, err := a.hub.Classes(r.Context())
	if err != nil {
		a.adminFail(w, r, err)
		return
	}
	out := make([]adminapi.Class, len(cs))
	for i, c := range cs {
		out[i] = adminapi.Class(c)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) createClass(w http.ResponseWriter, r *http.Request) {
	var in adminapi.Class
	if err := decodeAdmin(r, &in); err != nil {
		a.adminFail(w, r, err)
		return
	}
	if err := a.hub.CreateClass(r.Context(), store.Class(in)); err != nil {
		a.adminFail(w, r, err)
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

func machineOut(m hub.MachineView, full bool) adminapi.Machine {
	out := adminapi.Machine{
		ID: m.ID, Name: m.Name, Owner: m.Owner, Region: m.Region, Online: m.Online, LastSync: timePtr(m.LastSync),
		OfflineSince: timePtr(m.OfflineSince), Revoked: m.Revoked, RevokedAt: timePtr(m.RevokedAt), Sim: m.Sim,
		CertExpires:       timePtr(m.CertExpires),
		DesiredGeneration: m.Generation, AppliedGeneration: m.AppliedGeneration, AgentVersion: m.AgentVersion,
	}
	if full {
		out.OS, out.Arch, out.Inventory = m.OS, m.Arch, m.Inventory
		if m.Inventory != nil {
			out.Drivers = m.Inventory.Drivers
		}
		out.Certificates = certificatesOut(m.Certificates)
	}
	return out
}

func (a *API) listMachines(w http.ResponseWriter, r *http.Request) {
	ms, err := a.hub.Machines(r.Context())
	if err != nil {
		a.adminFail(w, r, err)
		return
	}
	out := make([]adminapi.Machine, len(ms))
	for i, m := range ms {
		out[i] = machineOut(m, false)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) showMachine(w http.ResponseWriter, r *http.Request) {
	m, err := a.hub.Machine(r.Context(), r.PathValue("id"))
	if err != nil {
		a.adminFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, machineOut(m, true))
}

func workloadOut(w store.Workload, m hub.MachineView) adminapi.Workload {
	return adminapi.Workload{
		ID: w.ID, Name: w.Name, Tenant: w.Tenant, Kind: string(w.Kind), Class: w.Class, Region: w.Region,
		Image: w.Image, State: string(w.State), Machine: w.Machine, Driver: w.Driver, Attempt: w.Attempt,
		Reason: w.Reason, Created: w.Created, Since: w.Since, UnknownSince: timePtr(hub.UnknownSince(w, m)),
		WorkloadSpec: w.Spec.Redacted(),
	}
}

func (a *API) listWorkloads(w http.ResponseWriter, r *http.Request) {
	ws, err := a.hub.Workloads(r.Context())
	if err != nil {
		a.adminFail(w, r, err)
		return
	}
	ms, err := a.hub.Machines(r.Context())
	if err != nil {
		a.adminFail(w, r, err)
		return
	}
	byID := make(map[string]hub.MachineView, len(ms))
	for _, m := range ms {
		byID[m.ID] = m
	}
	out := make([]adminapi.Workload, len(ws))
	for i, wl := range ws {
		out[i] = workloadOut(wl, byID[wl.Machine])
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) createWorkload(w http.ResponseWriter, r *http.Request) {
	var in adminapi.CreateWorkload
	if err := decodeAdmin(r, &in); err != nil {
		a.adminFail(w, r, err)
		return
	}
	wl, err := a.hub.CreateWorkload(r.Context(), workloadSpec(in))
	if err != nil {
		a.adminFail(w, r, err)
		return
	}
	out := workloadOut(wl, hub.MachineView{})
	out.Warning = a.hub.UnledWarning(r.Context(), wl.Region)
	writeJSON(w, http.StatusCreated, out)
}

// createWorkloads creates a batch, all or none: one transaction, one wake
// of the controller.
func (a *API) createWorkloads(w http.ResponseWriter, r *http.Request) {
	var in adminapi.CreateWorkloads
	if err := decodeAdmin(r, &in); err != nil {
		a.adminFail(w, r, err)
		return
	}
	specs := make([]hub.WorkloadSpec, len(in.Workloads))
	for i, cw := range in.Workloads {
		specs[i] = workloadSpec(cw)
	}
	wls, err := a.hub.CreateWorkloads(r.Context(), specs)
	if err != nil {
		a.adminFail(w, r, err)
		return
	}
	out := adminapi.CreatedWorkloads{Workloads: make([]adminapi.Workload, len(wls))}
	var warnings []string
	warned := make(map[string]bool)
	for i, wl := range wls {
		out.Workloads[i] = workloadOut(wl, hub.MachineView{})
		if !warned[wl.Region] {
			warned[wl.Region] = true
			if text := a.hub.UnledWarning(r.Context(), wl.Region); text != "" {
				warnings = append(warnings, text)
			}
		}
	}
	out.Warning = strings.Join(warnings, "; ")
	writeJSON(w, http.StatusCreated, out)
}

func workloadSpec(in adminapi.CreateWorkload) hub.WorkloadSpec {
	return hub.WorkloadSpec{
		Tenant: in.Tenant, Name: in.Name, Kind: protocol.Kind(in.Kind), Class: in.Class, Region: in.Region, Image: in.Image,
		Spec: in.WorkloadSpec,
	}
}

func (a *API) showWorkload(w http.ResponseWriter, r *http.Request) {
	wl, err := a.hub.Workload(r.Context(), r.PathValue("id"))
	if err != nil {
		a.adminFail(w, r, err)
		return
	}
	var m hub.MachineView
	if wl.Machine != "" {
		// A machine removed since reads as unknown nothing: m stays zero.
		if m, err = a.hub.Machine(r.Context(), wl.Machine); err != nil && !errors.Is(err, store.ErrNotFound) {
			a.adminFail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, workloadOut(wl, m))
}

func (a *API) act(act func(ctx context.Context, id string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := act(r.Context(), r.PathValue("id")); err != nil {
			a.adminFail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func (a *API) timeline(w http.ResponseWriter, r *http.Request) {
	es, err := a.hub.Timeline(r.Context(), r.PathValue("id"))
	if err != nil {
		a.adminFail(w, r, err)
		return
	}
	out := make([]adminapi.TimelineEntry, len(es))
	for i, e := range es {
		out[i] = adminapi.TimelineEntry{At: e.At, Text: e.Text}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) createToken(w http.ResponseWriter, r *http.Request) {
	var in adminapi.CreateToken
	if err := decodeAdmin(r, &in); err != nil {
		a.adminFail(w, r, err)
		return
	}
	if in.TTLSeconds < 0 || in.TTLSeconds > int64(hub.MaxTokenTTL/time.Second) {
		a.adminFail(w, r, fmt.Errorf("%w: ttl of %d seconds: want between %s and %s", hub.ErrInvalid, in.TTLSeconds, hub.MinTokenTTL, hub.MaxTokenTTL))
		return
	}
	tok, expires, err := a.hub.CreateEnrollToken(r.Context(), in.Owner, in.Region, time.Duration(in.TTLSeconds)*time.Second)
	if err != nil {
		a.adminFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, adminapi.Token{Token: tok.String(), Owner: in.Owner, Region: in.Region, Expires: expires,
		Warning: a.hub.UnledWarning(r.Context(), in.Region)})
}
