package httpapi

import (
	"context"
	"net/http"
)

// ReadyHandler serves GET /readyz for load balancers' health checks: 200
// while ready reports nil, else 503, so a replica that cannot reach its
// store is taken out of rotation. The reason goes to the log, not to the
// caller.
func (a *API) ReadyHandler(ready func(context.Context) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context()); err != nil {
			if r.Context().Err() == nil {
				a.log.Warn("not ready", "err", err)
			}
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "this hub replica cannot reach its store; its log says why")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
}
