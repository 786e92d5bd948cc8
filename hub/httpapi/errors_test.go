package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
)

// TestStatusOfEveryHubError: each error the hub returns has one status,
// whichever endpoint meets it, and the machine-facing ones say what to do.
func TestStatusOfEveryHubError(t *testing.T) {
	tests := []struct {
		err  error
		code int
		says string
	}{
		{store.ErrNotFound, http.StatusNotFound, "not found"},
		{store.ErrExists, http.StatusConflict, ""},
		{fmt.Errorf("%w: bad name", hub.ErrInvalid), http.StatusBadRequest, "bad name"},
		{fmt.Errorf("sync m: %w: x", hub.ErrBadRequest), http.StatusBadRequest, "x"},
		{hub.ErrTokenRefused, http.StatusUnauthorized, ""},
		{fmt.Errorf("sync m-1: %w", hub.ErrRevoked), http.StatusForbidden, "enrol it as a new machine"},
		{fmt.Errorf("renew m-1: %w", hub.ErrUnknownMachine), http.StatusForbidden, "einsora-agent enroll"},
		{hub.ErrForbidden, http.StatusForbidden, ""},
		{hub.ErrSuperseded, http.StatusConflict, ""},
		{hub.ErrNoCA, http.StatusNotFound, "einsora-hub serve"},
		// A token asked of a hub without a CA is the operator's mistake.
		{fmt.Errorf("%w: %w", hub.ErrInvalid, hub.ErrNoCA), http.StatusBadRequest, "certificate authority"},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			code, msg, ok := statusOf(tt.err)
			if !ok || code != tt.code || !strings.Contains(msg, tt.says) {
				t.Errorf("got %d %q (%v), want %d saying %q", code, msg, ok, tt.code, tt.says)
			}
		})
	}
	if code, _, ok := statusOf(errors.New("disk full")); ok || code != http.StatusInternalServerError {
		t.Errorf("the hub's own failure: got %d, %v", code, ok)
	}
}

// TestFailAnswersNothingToACallerGone: a poll its agent cut short is
// neither answered nor logged as the hub's failure; a failure of the hub is
// answered without its inner words.
func TestFailAnswersNothingToACallerGone(t *testing.T) {
	a := New(nil, nil, quiet())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest(http.MethodPost, "/", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	a.fail(w, r.Context(), context.Canceled, "sync failed", "the hub failed")
	if w.Body.Len() != 0 {
		t.Errorf("answered %d %q to a caller that left", w.Code, w.Body)
	}
	w = httptest.NewRecorder()
	a.fail(w, httptest.NewRequest(http.MethodPost, "/", nil).Context(), errors.New("disk full"), "sync failed", "the hub failed")
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "the hub failed") || strings.Contains(w.Body.String(), "disk") {
		t.Errorf("hub failure: got %d %q", w.Code, w.Body)
	}
}
