package serve

import (
	"context"
	"strings"
	"testing"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/metrics"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/postgres"
)

// wakerStore stands for the PostgreSQL store: a store that also carries
// wake-ups between replicas.
type wakerStore struct {
	store.Store
	notified []string
}

func (w *wakerStore) Notify(_ context.Context, payload string) error {
	w.notified = append(w.notified, payload)
	return nil
}

func (w *wakerStore) Listen(context.Context, func(string)) error { return nil }

func (w *wakerStore) Update(ctx context.Context, fn func(tx store.Tx) error) error { return nil }

// The timing wrapper must keep the replicas' wake-ups, which the hub finds
// by a type assertion: losing them would leave other replicas' agents
// waiting a whole poll for every change.
func TestTimedStoreKeepsReplicaWakeups(t *testing.T) {
	inner := &wakerStore{}
	m := metrics.New(metrics.Options{})
	st := timeStore(inner, m, clock.Real{})
	rw, ok := st.(replicaWaker)
	if !ok {
		t.Fatal("the timed store hides Notify and Listen")
	}
	rw.Notify(context.Background(), "m-1")
	if len(inner.notified) != 1 {
		t.Error("Notify did not reach the store")
	}
	st.Update(context.Background(), func(store.Tx) error { return nil })
	var sb strings.Builder
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "einsora_hub_store_commit_seconds" {
			sb.WriteString(f.String())
			if f.GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
				t.Errorf("commits timed: %v, want 1", f.GetMetric()[0].GetHistogram().GetSampleCount())
			}
		}
	}
	if sb.Len() == 0 {
		t.Error("no commit histogram")
	}
	if _, ok := timeStore(struct{ store.Store }{}, m, clock.Real{}).(replicaWaker); ok {
		t.Error("a store without wake-ups gained them")
	}
}

// On PostgreSQL the hub writes agents' reports and presence in batches the
// database's conflict checks keep fine-grained; on SQLite, all at once.
func TestWriteBatchFollowsTheStore(t *testing.T) {
	for storeURL, want := range map[string]int{
		"":                            0,
		"postgres://hub@db/einsora":   postgres.WriteBatch,
		"postgresql://hub@db/einsora": postgres.WriteBatch,
	} {
		if got := writeBatch(storeURL); got != want {
			t.Errorf("writeBatch(%q) = %d, want %d", storeURL, got, want)
		}
	}
}
