// Package metrics defines the hub's Prometheus metrics and the small API its
// call sites use. Every label set is bounded: results, causes, outcomes,
// states and regions, never a machine or a workload. A nil *Hub records
// nothing, so call sites need no checks.
package metrics

import (
	"context"
	"net/http"
	"regexp"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"einsora.dev/edge/hub"
)

// Results and causes used as label values.
const (
	ResultOK         = "ok"
	ResultRefused    = "refused"     // 401/403: unknown, revoked or wrong credentials
	ResultInvalid    = "invalid"     // other 4xx: the caller's mistake
	ResultThrottled  = "throttled"   // 429, 503: limits or shedding
	ResultError      = "error"       // 5xx: the hub's failure
	CauseShed        = "shed"        // too many handshakes in flight
	CauseCertificate = "certificate" // client certificate of an unknown or revoked machine
)

// Fleet is what the scrape-time collectors read.
type Fleet interface {
	MachineCounts(ctx context.Context) ([]hub.MachineCount, error)
	WaitingPolls() int
	// LeadingRegions says, for each region the hub runs a controller
	// for, whether it leads it now.
	LeadingRegions() map[string]bool
}

// Hub holds the hub's metrics.
type Hub struct {
	reg          *prometheus.Registry
	syncs        *prometheus.CounterVec
	wake         prometheus.Histogram
	admit        prometheus.Histogram
	placements   *prometheus.CounterVec
	commit       prometheus.Histogram
	handshakes   prometheus.Counter
	resumed      prometheus.Counter
	refusals     *prometheus.CounterVec
	enrolments   *prometheus.CounterVec
	renewals     *prometheus.CounterVec
	revocations  prometheus.Counter
	scrapeErrors prometheus.Counter
	timeout      time.Duration
}

// Options configures New.
type Options struct {
	Version string
	// Timeout bounds the machines read at each scrape.
	Timeout time.Duration
}

// latency buckets, 1 ms to 30 s: wake-ups and commits are milliseconds,
// a pass over a large fleet may take seconds.
var latency = prometheus.ExponentialBucketsRange(0.001, 30, 16)

// New registers the hub's metrics in a registry of their own.
func New(o Options) *Hub {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	m := &Hub{
		reg: prometheus.NewRegistry(), timeout: o.Timeout,
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "einsora_hub_syncs_total",
			Help: "Agent syncs answered, by result."}, []string{"result"}),
		wake: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "einsora_hub_wake_latency_seconds",
			Help: "From a change committed to the held poll's response written.", Buckets: latency}),
		admit: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "einsora_hub_admit_pass_seconds",
			Help: "Duration of one controller pass (admission and placement).", Buckets: latency}),
		placements: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "einsora_hub_placements_total",
			Help: "Placement decisions, by outcome (placed, queued) and reason code."}, []string{"outcome", "reason"}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "einsora_hub_store_commit_seconds",
			Help: "Duration of store write transactions, commit included.", Buckets: latency}),
		handshakes: prometheus.NewCounter(prometheus.CounterOpts{Name: "einsora_hub_tls_handshakes_total",
			Help: "TLS handshakes begun on the agents' port."}),
		resumed: prometheus.NewCounter(prometheus.CounterOpts{Name: "einsora_hub_tls_resumed_total",
			Help: "TLS handshakes on the agents' port that resumed a session and were accepted."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "einsora_hub_tls_refusals_total",
			Help: "TLS handshakes refused, by cause (shed, certificate)."}, []string{"cause"}),
		enrolments: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "einsora_hub_enrolments_total",
			Help: "Enrolment requests, by result."}, []string{"result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "einsora_hub_renewals_total",
			Help: "Certificate renewals, by result."}, []string{"result"}),
		revocations: prometheus.NewCounter(prometheus.CounterOpts{Name: "einsora_hub_revocations_total",
			Help: "Machines revoked by an operator."}),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "einsora_hub_scrape_errors_total",
			Help: "Scrapes at which the machines could not be read."}),
	}
	m.reg.MustRegister(m.syncs, m.wake, m.admit, m.placements, m.commit, m.handshakes, m.resumed, m.refusals,
		m.enrolments, m.renewals, m.revocations, m.scrapeErrors,
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(stackScanned)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "einsora_hub_build_info",
		Help:        "Always 1; the labels say which hub runs.",
		ConstLabels: prometheus.Labels{"version": o.Version, "goversion": runtime.Version()}}, func() float64 { return 1 }))
	return m
}

// stackScanned adds go_gc_scan_stack_bytes to the Go runtime's default
// metrics: the stack its goroutines use, as the last collection scanned
// it. A collection halves a goroutine's stack only while it uses less than
// a quarter of it, so beside go_memstats_stack_inuse_bytes (what they
// keep) it tells why held polls cost what they do (docs/performance.md,
// "A held poll's stack").
var stackScanned = collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/scan/stack:bytes$`)}

// Watch registers the collectors that read f at each scrape: machines by
// state and region, long polls held, and leadership. Call it once.
func (m *Hub) Watch(f Fleet) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "einsora_hub_long_polls",
		Help: "Agent polls held open now."}, func() float64 { return float64(f.WaitingPolls()) }))
	m.reg.MustRegister(leaderCollector{f})
	m.reg.MustRegister(&fleetCollector{fleet: f, timeout: m.timeout, errs: m.scrapeErrors})
}

// WatchQueue registers the gauge of machines' requests waiting their turn
// past --max-active, read by queued at each scrape. Call it once.
func (m *Hub) WatchQueue(queued func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "einsora_hub_requests_queued",
		Help: "Machines' requests waiting their turn past --max-active now."}, func() float64 { return float64(queued()) }))
}

// Handler serves the registry in the Prometheus text format.
func (m *Hub) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Registry is where the metrics are registered, for tests and further
// collectors.
func (m *Hub) Registry() *prometheus.Registry { return m.reg }

// SyncResult counts one answered sync.
func (m *Hub) SyncResult(result string) {
	if m != nil {
		m.syncs.WithLabelValues(result).Inc()
	}
}

// WakeLatency records the time from a committed change to the held poll's
// response.
func (m *Hub) WakeLatency(d time.Duration) {
	if m != nil {
		m.wake.Observe(d.Seconds())
	}
}

// AdmitPass records one controller pass.
func (m *Hub) AdmitPass(d time.Duration) {
	if m != nil {
		m.admit.Observe(d.Seconds())
	}
}

// Placement counts one placement decision; reason is a placement reason
// code (bounded: placement.Codes and the hub's), "none" when placed.
func (m *Hub) Placement(outcome, reason string) {
	if m != nil {
		m.placements.WithLabelValues(outcome, reason).Inc()
	}
}

// StoreCommit records one write transaction.
func (m *Hub) StoreCommit(d time.Duration) {
	if m != nil {
		m.commit.Observe(d.Seconds())
	}
}

// TLSHandshake counts a handshake begun.
func (m *Hub) TLSHandshake() {
	if m != nil {
		m.handshakes.Inc()
	}
}

// TLSResumed counts an accepted handshake that resumed a session.
func (m *Hub) TLSResumed() {
	if m != nil {
		m.resumed.Inc()
	}
}

// TLSRefused counts a refused handshake.
func (m *Hub) TLSRefused(cause string) {
	if m != nil {
		m.refusals.WithLabelValues(cause).Inc()
	}
}

// Enrolment counts one enrolment request.
func (m *Hub) Enrolment(result string) {
	if m != nil {
		m.enrolments.WithLabelValues(result).Inc()
	}
}

// Renewal counts one renewal request.
func (m *Hub) Renewal(result string) {
	if m != nil {
		m.renewals.WithLabelValues(result).Inc()
	}
}

// Revocation counts one machine revoked.
func (m *Hub) Revocation() {
	if m != nil {
		m.revocations.Inc()
	}
}

// ResultOf maps an HTTP status to a bounded result label.
func ResultOf(status int) string {
	switch {
	case status < 400:
		return ResultOK
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return ResultRefused
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		return ResultThrottled
	case status < 500:
		return ResultInvalid
	}
	return ResultError
}

var leaderDesc = prometheus.NewDesc("einsora_hub_leader", "1 while this hub holds the region's controller lease, 0 while it stands by.", []string{"region"}, nil)

// leaderCollector reports each region this hub runs a controller for
// (bounded by hub.MaxRegions).
type leaderCollector struct{ fleet Fleet }

func (c leaderCollector) Describe(ch chan<- *prometheus.Desc) { ch <- leaderDesc }

func (c leaderCollector) Collect(ch chan<- prometheus.Metric) {
	for region, leading := range c.fleet.LeadingRegions() {
		v := 0.0
		if leading {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, v, region)
	}
}

var machinesDesc = prometheus.NewDesc("einsora_hub_machines", "Machines by state (online, offline, revoked) and region.", []string{"state", "region"}, nil)

// fleetCollector counts machines at scrape time, from what presence needs
// of each (hub.MachineCounts), not their records.
type fleetCollector struct {
	fleet   Fleet
	timeout time.Duration
	errs    prometheus.Counter
}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) { ch <- machinesDesc }

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	counts, err := c.fleet.MachineCounts(ctx)
	if err != nil {
		c.errs.Inc()
		ch <- prometheus.NewInvalidMetric(machinesDesc, err)
		return
	}
	for _, n := range counts {
		ch <- prometheus.MustNewConstMetric(machinesDesc, prometheus.GaugeValue, float64(n.N), n.State, n.Region)
	}
}

// The hub measures through this package.
var _ hub.Metrics = (*Hub)(nil)
