package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/internal/gctest"
	"einsora.dev/edge/protocol"
)

// recordingParker is a Parker that writes the answer to a recorder.
type recordingParker struct {
	parked   chan func()
	answered chan *httptest.ResponseRecorder
}

func (p *recordingParker) Parked(cancel func()) { p.parked <- cancel }

func (p *recordingParker) Answer(write func(http.ResponseWriter)) {
	rec := httptest.NewRecorder()
	write(rec)
	p.answered <- rec
}

type requestStateKey struct{}

// A parked poll's answer keeps nothing of its request: not its context,
// whose chain holds the request's and its connection's state for as long
// as the poll is parked.
func TestParkedAnswerKeepsNotItsRequest(t *testing.T) {
	h := newTestHub(t)
	h.machine("m-1")
	d, err := h.Sync(context.Background(), "m-1", &protocol.SyncRequest{ProtocolVersion: protocol.Version})
	if err != nil {
		t.Fatal(err)
	}
	pk := &recordingParker{parked: make(chan func(), 1), answered: make(chan *httptest.ResponseRecorder, 1)}
	var freed <-chan struct{}
	func() {
		var state *[4096]byte
		state, freed = gctest.Watched()
		body := fmt.Sprintf(`{"protocol_version":%d,"store_id":%q,"generation":%d}`, protocol.Version, d.StoreID, d.Generation)
		r := httptest.NewRequest(http.MethodPost, protocol.SyncPath, strings.NewReader(body))
		r = r.WithContext(WithParker(context.WithValue(r.Context(), requestStateKey{}, state), pk))
		h.api.SyncHandler(func(*http.Request) (string, error) { return "m-1", nil }).ServeHTTP(httptest.NewRecorder(), r)
	}()
	select {
	case <-pk.parked:
	default:
		t.Fatal("the poll was not parked")
	}
	if !gctest.Freed(freed, 5*time.Second) {
		t.Fatal("the request's context was kept with its parked poll")
	}
	h.Wake("m-1")
	select {
	case rec := <-pk.answered:
		var resp protocol.SyncResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); rec.Code != http.StatusOK || err != nil || resp.Unchanged {
			t.Fatalf("woken: %d %s (%v); want its desired state", rec.Code, rec.Body, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the parked poll got no answer")
	}
}
