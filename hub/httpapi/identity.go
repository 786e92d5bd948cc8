package httpapi

import (
	"net/http"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/store"
)

// revokeMachine serves POST /v1/machines/{id}/revoke: the machine for
// good, or with ?serial= one of its certificates.
func (a *API) revokeMachine(w http.ResponseWriter, r *http.Request) {
	var err error
	if serial := r.URL.Query().Get("serial"); serial != "" {
		err = a.hub.RevokeCertificate(r.Context(), r.PathValue("id"), serial)
	} else {
		err = a.hub.RevokeMachine(r.Context(), r.PathValue("id"))
	}
	if err != nil {
		a.adminFail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// revokeCertificate serves POST /v1/certificates/{serial}/revoke.
func (a *API) revokeCertificate(w http.ResponseWriter, r *http.Request) {
	if err := a.hub.RevokeCertificate(r.Context(), "", r.PathValue("serial")); err != nil {
		a.adminFail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// counters serves GET /v1/counters: what the hub refused or bounded of
// untrusted input since it started.
func (a *API) counters(w http.ResponseWriter, r *http.Request) {
	c := a.hub.Counters()
	writeJSON(w, http.StatusOK, adminapi.Counters{
		DroppedStatuses: c.DroppedStatuses, StaleStatuses: c.StaleStatuses,
		TimelineLinesDropped: c.TimelineLinesDropped, TimelineLinesRetired: c.TimelineLinesRetired,
		LongPolls: a.hub.WaitingPolls(),
	})
}

func certificatesOut(cs []store.Certificate) []adminapi.Certificate {
	out := make([]adminapi.Certificate, len(cs))
	for i, c := range cs {
		out[i] = adminapi.Certificate{Serial: c.Serial, Issued: c.Issued, Expires: c.Expires, Revoked: timePtr(c.Revoked)}
	}
	return out
}
