package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
)

type fleet struct {
	ms  []hub.MachineView
	err error
}

// MachineCounts counts f's views as the hub counts its machines.
func (f fleet) MachineCounts(context.Context) ([]hub.MachineCount, error) {
	counts := map[[2]string]int{}
	for _, m := range f.ms {
		counts[[2]string{m.Region, m.State()}]++
	}
	var out []hub.MachineCount
	for k, n := range counts {
		out = append(out, hub.MachineCount{Region: k[0], State: k[1], N: n})
	}
	return out, f.err
}
func (f fleet) WaitingPolls() int               { return 3 }
func (f fleet) LeadingRegions() map[string]bool { return map[string]bool{"eu": true, "us": false} }

func scrape(t *testing.T, m *Hub) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

func TestFleetAtScrapeTime(t *testing.T) {
	f := &fleet{ms: []hub.MachineView{
		{Machine: store.Machine{ID: "a", Region: "eu"}, Online: true},
		{Machine: store.Machine{ID: "b", Region: "eu"}, Online: true},
		{Machine: store.Machine{ID: "c", Region: "eu"}},
		{Machine: store.Machine{ID: "d", Region: "us", Revoked: true}, Online: true},
	}}
	m := New(Options{Version: "v1.0.0"})
	m.Watch(f)
	m.WatchQueue(func() int { return 7 })
	m.StoreCommit(2 * time.Millisecond)
	out := scrape(t, m)
	for _, want := range []string{
		`einsora_hub_requests_queued 7`,
		`einsora_hub_machines{region="eu",state="online"} 2`,
		`einsora_hub_machines{region="eu",state="offline"} 1`,
		`einsora_hub_machines{region="us",state="revoked"} 1`,
		`einsora_hub_long_polls 3`,
		`einsora_hub_leader{region="eu"} 1`,
		`einsora_hub_leader{region="us"} 0`,
		`einsora_hub_store_commit_seconds_count 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	f.err = errors.New("store down")
	out = scrape(t, m)
	if strings.Contains(out, "einsora_hub_machines{") || !strings.Contains(out, "einsora_hub_long_polls 3") {
		t.Error("a failed machines read hid the other metrics or showed stale counts")
	}
	scrape(t, m)
	// Collectors run concurrently: a scrape may not show its own failed
	// read yet, so read the count at a scrape that does not fail.
	f.err = nil
	if out := scrape(t, m); !strings.Contains(out, "einsora_hub_scrape_errors_total 2\n") {
		t.Errorf("failed reads are not counted:\n%s", out)
	}
}

func TestResultOfAndNil(t *testing.T) {
	for code, want := range map[int]string{200: ResultOK, 204: ResultOK, 401: ResultRefused, 403: ResultRefused,
		400: ResultInvalid, 413: ResultInvalid, 429: ResultThrottled, 503: ResultThrottled, 500: ResultError} {
		if got := ResultOf(code); got != want {
			t.Errorf("ResultOf(%d) = %s, want %s", code, got, want)
		}
	}
	var m *Hub // a hub without metrics: every call is a no-op
	m.SyncResult(ResultOK)
	m.WakeLatency(time.Second)
	m.AdmitPass(time.Second)
	m.Placement("placed", "")
	m.StoreCommit(time.Second)
	m.TLSHandshake()
	m.TLSResumed()
	m.TLSRefused(CauseShed)
	m.Enrolment(ResultOK)
	m.Renewal(ResultOK)
	m.Revocation()
}
