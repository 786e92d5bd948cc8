// Package metrics defines the agent's Prometheus metrics and serves them on
// a loopback address. The agent's drivers, transport and inventory probe
// are wrapped here, so the agent itself needs no metrics code. Labels are
// bounded: drivers, calls, results and states, never a workload.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// Agent holds the agent's metrics. A nil *Agent records nothing.
type Agent struct {
	reg       *prometheus.Registry
	calls     *prometheus.HistogramVec
	apply     prometheus.Histogram
	syncs     *prometheus.CounterVec
	workloads *prometheus.GaugeVec
	probe     prometheus.Histogram
}

var latency = prometheus.ExponentialBucketsRange(0.001, 120, 16)

// New registers the agent's metrics in a registry of their own.
func New(version string) *Agent {
	a := &Agent{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "einsora_agent_driver_call_seconds",
			Help: "Driver call latency, by driver, call (start, stop, remove, list, probe) and result (ok, error).", Buckets: latency},
			[]string{"driver", "call", "result"}),
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "einsora_agent_apply_pass_seconds",
			Help: "Duration of one apply pass over desired state.", Buckets: latency}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "einsora_agent_syncs_total",
			Help: "Syncs with the hub, by result (ok, reconnect, error, canceled)."}, []string{"result"}),
		workloads: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "einsora_agent_workloads",
			Help: "Instances each driver holds, by state, as of its last list."}, []string{"driver", "state"}),
		probe: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "einsora_agent_inventory_probe_seconds",
			Help: "Duration of an inventory probe.", Buckets: latency}),
	}
	a.reg.MustRegister(a.calls, a.apply, a.syncs, a.workloads, a.probe,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "einsora_agent_build_info",
		Help:        "Always 1; the labels say which agent runs.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()}}, func() float64 { return 1 }))
	return a
}

// Handler serves the metrics in the Prometheus text format.
func (a *Agent) Handler() http.Handler {
	return promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// ApplyPass records one apply pass.
func (a *Agent) ApplyPass(d time.Duration) {
	if a != nil {
		a.apply.Observe(d.Seconds())
	}
}

// Listen checks that addr is on loopback and listens there: the metrics
// carry no secrets, but they are the operator's, not the network's.
func Listen(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %q: want HOST:PORT on loopback, e.g. 127.0.0.1:9464: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--metrics %q: the metrics listen on loopback only (127.0.0.1, ::1 or localhost)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	return ln, nil
}

// Serve serves /metrics on ln until ctx is done.
func (a *Agent) Serve(ctx context.Context, ln net.Listener, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	log.Info("agent metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("agent metrics stopped", "err", err)
	}
}

// Probe wraps an inventory probe so its duration is recorded.
func (a *Agent) Probe(fn func(context.Context) protocol.Inventory) func(context.Context) protocol.Inventory {
	return func(ctx context.Context) protocol.Inventory {
		start := time.Now()
		inv := fn(ctx)
		a.probe.Observe(time.Since(start).Seconds())
		return inv
	}
}

// Transport wraps t so each sync's result is counted.
func (a *Agent) Transport(t hubclient.Transport) hubclient.Transport {
	return transport{next: t, a: a}
}

type transport struct {
	next hubclient.Transport
	a    *Agent
}

func (t transport) Sync(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
	resp, err := t.next.Sync(ctx, req)
	result := "ok"
	switch {
	case err != nil && ctx.Err() != nil:
		result = "canceled"
	case err != nil:
		result = "error"
	case resp != nil && resp.Reconnect != nil:
		result = "reconnect"
	}
	t.a.syncs.WithLabelValues(result).Inc()
	return resp, err
}

// Host wraps every driver of h so its calls are timed and its lists
// counted by state.
func (a *Agent) Host(h *drivers.Host) *drivers.Host {
	var ds []drivers.Driver
	for _, d := range h.All() {
		w := &driver{Driver: d, a: a}
		if p, ok := d.(drivers.Prober); ok {
			ds = append(ds, proberDriver{driver: w, p: p})
		} else {
			ds = append(ds, w)
		}
	}
	return drivers.NewHost(ds...)
}

type driver struct {
	drivers.Driver
	a *Agent
}

// proberDriver keeps a driver's Prober, which the agent looks for.
type proberDriver struct {
	*driver
	p drivers.Prober
}

func (d proberDriver) Probe(ctx context.Context) error {
	return d.time("probe", func() error { return d.p.Probe(ctx) })
}

func (d *driver) time(call string, fn func() error) error {
	start := time.Now()
	err := fn()
	result := "ok"
	if err != nil {
		result = "error"
	}
	d.a.calls.WithLabelValues(d.Name(), call, result).Observe(time.Since(start).Seconds())
	return err
}

func (d *driver) Start(ctx context.Context, spec drivers.Spec) error {
	return d.time("start", func() error { return d.Driver.Start(ctx, spec) })
}

func (d *driver) Stop(ctx context.Context, workload string) error {
	return d.time("stop", func() error { return d.Driver.Stop(ctx, workload) })
}

func (d *driver) Remove(ctx context.Context, workload string) error {
	return d.time("remove", func() error { return d.Driver.Remove(ctx, workload) })
}

func (d *driver) List(ctx context.Context) ([]drivers.Instance, error) {
	var out []drivers.Instance
	err := d.time("list", func() (err error) { out, err = d.Driver.List(ctx); return err })
	if err == nil {
		counts := map[drivers.State]int{}
		for _, in := range out {
			counts[in.State]++
		}
		// Reset the driver's states so one that emptied reads 0; the
		// label values are the drivers' own bounded set of states.
		d.a.workloads.DeletePartialMatch(prometheus.Labels{"driver": d.Name()})
		for s, n := range counts {
			d.a.workloads.WithLabelValues(d.Name(), string(s)).Set(float64(n))
		}
	}
	return out, err
}
