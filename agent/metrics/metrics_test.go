package metrics

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/sim"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

func scrape(t *testing.T, a *Agent) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("metrics do not parse: %v", err)
	}
	return fams
}

func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
next:
	for _, m := range fams[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func TestDriverCallsAndWorkloadsByState(t *testing.T) {
	d, err := sim.New(t.TempDir(), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a := New("v1.0.0")
	host := a.Host(drivers.NewHost(d))
	w, ok := host.Get("sim")
	if !ok {
		t.Fatal("the wrapped host lost the sim driver")
	}
	if _, isProber := any(d).(drivers.Prober); isProber {
		if _, ok := w.(drivers.Prober); !ok {
			t.Error("the wrapper hides the driver's Prober")
		}
	}
	ctx := context.Background()
	if err := w.Start(ctx, drivers.Spec{Workload: "w1", Attempt: 1, Image: "sim:"}); err != nil {
		t.Fatal(err)
	}
	var ins []drivers.Instance
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ins, err = w.List(ctx); err != nil {
			t.Fatal(err)
		}
		if len(ins) == 1 && ins[0].State == drivers.StateRunning || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	fams := scrape(t, a)
	if v := sample(fams, "einsora_agent_driver_call_seconds", "driver", "sim", "call", "start", "result", "ok"); v != 1 {
		t.Errorf("start calls = %v, want 1", v)
	}
	if v := sample(fams, "einsora_agent_workloads", "driver", "sim", "state", "running"); v != 1 {
		t.Errorf("running workloads = %v, want 1", v)
	}
	if err := w.Remove(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.List(ctx); err != nil {
		t.Fatal(err)
	}
	if v := sample(scrape(t, a), "einsora_agent_workloads", "driver", "sim", "state", "running"); v > 0 {
		t.Errorf("running workloads after removal = %v, want none", v)
	}
}

func TestSyncResultsProbeAndApplyPass(t *testing.T) {
	a := New("v1.0.0")
	fail := true
	tr := a.Transport(hubclient.Func(func(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
		if fail {
			return nil, errors.New("hub down")
		}
		return &protocol.SyncResponse{}, nil
	}))
	tr.Sync(context.Background(), &protocol.SyncRequest{})
	fail = false
	tr.Sync(context.Background(), &protocol.SyncRequest{})
	tr.Sync(context.Background(), &protocol.SyncRequest{})
	probe := a.Probe(func(context.Context) protocol.Inventory { return protocol.Inventory{CPUs: 2} })
	if inv := probe(context.Background()); inv.CPUs != 2 {
		t.Errorf("the wrapped probe returned %+v", inv)
	}
	a.ApplyPass(3 * time.Millisecond)
	fams := scrape(t, a)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"einsora_agent_syncs_total", []string{"result", "error"}, 1},
		{"einsora_agent_syncs_total", []string{"result", "ok"}, 2},
		{"einsora_agent_inventory_probe_seconds", nil, 1},
		{"einsora_agent_apply_pass_seconds", nil, 1},
		{"einsora_agent_build_info", []string{"version", "v1.0.0"}, 1},
	} {
		if v := sample(fams, c.name, c.labels...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	var nilAgent *Agent
	nilAgent.ApplyPass(time.Second) // a nil Agent records nothing, without a panic
}

func TestListenIsLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "example.com:0", "nonsense"} {
		if ln, err := Listen(addr); err == nil {
			ln.Close()
			t.Errorf("Listen(%q) accepted an address beyond loopback", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		ln, err := Listen(addr)
		if err != nil {
			t.Errorf("Listen(%q): %v", addr, err)
			continue
		}
		ln.Close()
	}
}
