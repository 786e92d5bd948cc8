package httpapi

import (
	"context"
	"errors"
	"net/http"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
)

// statusOf is the one mapping of the hub's errors to what a caller is
// told: the caller's mistakes are 4xx with the error's own words (and,
// where the machine must act, what to do); anything else is the hub's
// failure, which the caller does not get to read. ok is false for those.
func statusOf(err error) (code int, msg string, ok bool) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, err.Error(), true
	case errors.Is(err, store.ErrExists):
		return http.StatusConflict, err.Error(), true
	case errors.Is(err, hub.ErrInvalid), errors.Is(err, hub.ErrBadRequest):
		return http.StatusBadRequest, err.Error(), true
	case errors.Is(err, hub.ErrTokenRefused):
		return http.StatusUnauthorized, err.Error(), true
	case errors.Is(err, hub.ErrCertificateRevoked):
		return http.StatusForbidden, err.Error() + "; this certificate is no longer honoured: enrol the machine again with a new token: einsora-agent enroll", true
	case errors.Is(err, hub.ErrRevoked):
		return http.StatusForbidden, err.Error() + "; an operator revoked this machine: delete the machine-id file in the agent's state directory and enrol it as a new machine", true
	case errors.Is(err, hub.ErrUnknownMachine):
		return http.StatusForbidden, err.Error() + "; enrol the machine again with: einsora-agent enroll", true
	case errors.Is(err, hub.ErrSimRefused):
		return http.StatusForbidden, hub.ErrSimRefused.Error(), true
	case errors.Is(err, hub.ErrForbidden):
		return http.StatusForbidden, err.Error(), true
	case errors.Is(err, hub.ErrSuperseded):
		return http.StatusConflict, err.Error(), true
	case errors.Is(err, hub.ErrUnavailable):
		return http.StatusServiceUnavailable, err.Error(), true
	case errors.Is(err, hub.ErrNoCA):
		return http.StatusNotFound, "this hub enrols no machines; use a hub started with: einsora-hub serve", true
	}
	return http.StatusInternalServerError, "", false
}

// fail answers err. A request whose caller went away is answered nothing;
// a failure of the hub is logged as what and answered with public.
func (a *API) fail(w http.ResponseWriter, ctx context.Context, err error, what, public string, attrs ...any) {
	code, msg, ok := statusOf(err)
	switch {
	case ok:
		writeError(w, code, msg)
	case ctx.Err() != nil:
		// The caller went away or cut its poll short: nothing to answer.
	default:
		a.log.Error(what, append(attrs, "err", err)...)
		writeError(w, code, public)
	}
}
