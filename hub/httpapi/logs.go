package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/protocol"
)

// LogsHandler serves POST /agent/v1/logs: a machine's upload of a
// workload's output, named by the token its sync answer carried. The body
// is read as it comes, for as long as a reader listens, so the server's
// read and write deadlines are lifted for it.
func (a *API) LogsHandler(identify func(*http.Request) (string, error)) http.Handler {
	return machineHandler(identify, func(w http.ResponseWriter, r *http.Request, machineID string) {
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		err := a.hub.AcceptLogs(r.Context(), machineID, r.Header.Get(protocol.LogTokenHeader), r.Body)
		if err != nil {
			a.fail(w, r.Context(), err, "log upload failed", "the hub failed to relay the upload", "machine", machineID)
			return
		}
		writeJSON(w, http.StatusOK, struct{}{})
	})
}

// workloadLogs serves GET /v1/workloads/{id}/logs?tail=N&since=RFC3339&follow=1:
// LogLine JSON one per line, flushed as each comes. An error before the
// first line is the usual JSON error; one after it is a last line
// {"error": "..."}.
func (a *API) workloadLogs(w http.ResponseWriter, r *http.Request) {
	var o hub.LogOptions
	q := r.URL.Query()
	if s := q.Get("tail"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			a.adminFail(w, r, fmt.Errorf("%w: tail %q: want a number of lines, 0 or more", hub.ErrInvalid, s))
			return
		}
		o.Tail = n
	}
	if s := q.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			a.adminFail(w, r, fmt.Errorf("%w: since %q: want an RFC 3339 time", hub.ErrInvalid, s))
			return
		}
		o.Since = t
	}
	o.Follow = q.Get("follow") == "1" || q.Get("follow") == "true"
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	started := false
	// Lines are gathered while more wait and flushed when none does, so
	// a fast stream is not one write per line and a slow one is not held.
	buf := bufio.NewWriterSize(w, 32<<10)
	enc := json.NewEncoder(buf)
	o.Idle = func() error {
		if !started {
			return nil
		}
		if err := buf.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}
	err := a.hub.WorkloadLogs(r.Context(), r.PathValue("id"), o, func(l protocol.LogLine) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		return enc.Encode(l)
	})
	if started {
		o.Idle()
	}
	switch {
	case err == nil && !started:
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	case err != nil && !started:
		a.adminFail(w, r, err)
	case err != nil && r.Context().Err() == nil:
		msg := err.Error()
		if _, _, ok := statusOf(err); !ok && !errors.Is(err, hub.ErrUnavailable) {
			a.log.Error("workload logs failed", "workload", r.PathValue("id"), "err", err)
		}
		json.NewEncoder(w).Encode(struct {
			Error string `json:"error"`
		}{msg})
	}
}
