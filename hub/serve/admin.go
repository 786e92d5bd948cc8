package serve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/dashboard"
	"einsora.dev/edge/hub/metrics"
	"einsora.dev/edge/hub/store"
)

// adminMux is everything on the admin listener: the dashboard under
// dashboard.Prefix, /metrics, /healthz and /readyz without the admin token
// (the listener is on loopback; see docs/operations.md), and the admin API,
// which checks the token itself, for the rest.
func adminMux(api, dash, prom http.Handler, health *Health) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(dashboard.Prefix, dash)
	mux.Handle("GET /{$}", http.RedirectHandler(dashboard.Prefix, http.StatusSeeOther))
	mux.Handle("GET /metrics", prom)
	mux.HandleFunc("GET /healthz", health.Healthz)
	mux.HandleFunc("GET /readyz", health.Readyz)
	mux.Handle("/", api)
	return mux
}

// Leader says whether this hub leads its region.
type Leader interface {
	Leadership() (leading bool, changed <-chan struct{})
}

// Health answers /healthz and /readyz.
type Health struct {
	Store  store.Store
	Leader Leader
	// Lease is the region's controller lease, controller:<region>.
	Lease   string
	Clock   clock.Clock
	Timeout time.Duration
}

// Healthz answers while the process serves HTTP.
func (h *Health) Healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// Readyz answers 200 when the store answers and the region has a leader:
// this hub, or a live holder of the lease this hub stands by for.
func (h *Health) Readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	msg, err := h.ready(r.Context())
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready:", err)
		return
	}
	fmt.Fprintln(w, "ready:", msg)
}

func (h *Health) ready(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, max(h.Timeout, time.Second))
	defer cancel()
	var lease store.Lease
	err := h.Store.View(ctx, func(tx store.Tx) (err error) {
		lease, err = tx.Lease(h.Lease)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("the store does not answer: %w", err)
	}
	if leading, _ := h.Leader.Leadership(); leading {
		return "leading " + h.Lease, nil
	}
	if err == nil && lease.Holder != "" && h.Clock.Now().Before(lease.Expires) {
		return "standby; " + h.Lease + " is held by " + lease.Holder, nil
	}
	return "", fmt.Errorf("no hub holds %s yet", h.Lease)
}

// replicaWaker is what the PostgreSQL store adds: wake-ups between hub
// replicas. The hub finds it by a type assertion, so the timing wrapper
// must keep it.
type replicaWaker interface {
	Notify(ctx context.Context, payload string) error
	Listen(ctx context.Context, wake func(payload string)) error
}

// timeStore wraps st so its write transactions are timed, keeping every
// interface st implements that the hub looks for.
func timeStore(st store.Store, m *metrics.Hub, clk clock.Clock) store.Store {
	ts := timedStore{Store: st, m: m, clk: clk}
	if rw, ok := st.(replicaWaker); ok {
		return timedWakerStore{timedStore: ts, replicaWaker: rw}
	}
	return ts
}

type timedWakerStore struct {
	timedStore
	replicaWaker
}

// timedStore records the duration of each write transaction.
type timedStore struct {
	store.Store
	m   *metrics.Hub
	clk clock.Clock
}

func (s timedStore) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	start := s.clk.Now()
	err := s.Store.Update(ctx, fn)
	s.m.StoreCommit(s.clk.Now().Sub(start))
	return err
}

// statusWriter keeps the status a handler wrote, for the metrics.
type statusWriter struct {
	http.ResponseWriter
	code     int
	hijacked bool
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Hijack takes the connection for a parked poll, whose answer is counted
// when written (writeParked), not here.
func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	s.hijacked = true
	return http.NewResponseController(s.ResponseWriter).Hijack()
}

// counted calls record with the result of each request next answers.
func counted(record func(result string), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if !sw.hijacked {
			record(metrics.ResultOf(max(sw.code, http.StatusOK)))
		}
	})
}

// countRevocations counts the admin API's successful revocations.
func countRevocations(m *metrics.Hub, api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/machines/{id}/revoke", counted(func(result string) {
		if result == metrics.ResultOK {
			m.Revocation()
		}
	}, api))
	mux.Handle("/", api)
	return mux
}

// revokeCounter counts the dashboard's revocations.
type revokeCounter struct {
	dashboard.Hub
	m *metrics.Hub
}

func (r revokeCounter) RevokeMachine(ctx context.Context, id string) error {
	err := r.Hub.RevokeMachine(ctx, id)
	if err == nil {
		r.m.Revocation()
	}
	return err
}
