package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
	"einsora.dev/edge/internal/syncbuf"
)

// brokenStore fails, or hangs until the caller gives up, once broken.
type brokenStore struct {
	store.Store
	mode atomic.Value // "", "fail" or "hang"
}

var errStoreDown = errors.New(`failed to connect to user=einsora database=hubdb host=10.1.2.3: dial tcp 10.1.2.3:5432: connect: connection refused`)

func (s *brokenStore) broken(ctx context.Context) error {
	switch s.mode.Load() {
	case "fail":
		return errStoreDown
	case "hang":
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *brokenStore) View(ctx context.Context, fn func(tx store.Tx) error) error {
	if err := s.broken(ctx); err != nil {
		return err
	}
	return s.Store.View(ctx, fn)
}

func (s *brokenStore) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	if err := s.broken(ctx); err != nil {
		return err
	}
	return s.Store.Update(ctx, fn)
}

// A store's error reaches the hub's log whole and the admin client in
// general words, with no user, database or address; a store that does not
// answer makes the admin API answer 503 in time, not hang (issue 18).
func TestAdminStoreErrorsAreGenericAndTimed(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	broken := &brokenStore{Store: st}
	h, err := hub.New(context.Background(), hub.Config{Store: broken, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var log syncbuf.Buffer
	api := New(h, nil, slog.New(slog.NewTextHandler(io.MultiWriter(&log), nil)))
	srv := httptest.NewServer(api.AdminHandler("secret"))
	defer srv.Close()
	get := func() (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/v1/workloads", nil)
		req.Header.Set("Authorization", "Bearer secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	broken.mode.Store("fail")
	code, body := get()
	if code != http.StatusInternalServerError {
		t.Errorf("store down: got %d, want 500", code)
	}
	for _, secret := range []string{"einsora", "hubdb", "10.1.2.3", "5432"} {
		if strings.Contains(body, secret) {
			t.Errorf("the client was shown %q: %s", secret, body)
		}
	}
	if !strings.Contains(log.String(), "10.1.2.3") {
		t.Errorf("the log lacks the store's error: %s", log.String())
	}

	old := adminTimeout
	adminTimeout = 200 * time.Millisecond
	defer func() { adminTimeout = old }()
	broken.mode.Store("hang")
	start := time.Now()
	code, body = get()
	if code != http.StatusServiceUnavailable || time.Since(start) > 5*time.Second {
		t.Errorf("store hanging: got %d after %v (%s), want 503 after the admin timeout", code, time.Since(start), body)
	}
}

// A replica that cannot reach its store sends its agents away: a held
// poll is answered once the presence batch fails, and every sync gets 503
// with Retry-After and Connection: close (a GOAWAY over HTTP/2), so a load
// balancer moves the agent to a replica that can answer (issue 18).
func TestReplicaWithoutStoreSendsItsAgentsAway(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	broken := &brokenStore{Store: st}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := hub.New(ctx, hub.Config{Store: broken, Logger: quiet(), PollTimeout: time.Minute, OfflineAfter: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureTenant(ctx, "local"); err != nil {
		t.Fatal(err)
	}
	if err := h.RegisterMachine(ctx, "m-1", "m-1", "local", "local"); err != nil {
		t.Fatal(err)
	}
	api := New(h, nil, quiet())
	srv := httptest.NewServer(api.SyncHandler(func(*http.Request) (string, error) { return "m-1", nil }))
	defer srv.Close()
	readySrv := httptest.NewServer(api.ReadyHandler(h.Ready))
	defer readySrv.Close()
	readyz := func() int {
		t.Helper()
		resp, err := http.Get(readySrv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := readyz(); code != http.StatusOK {
		t.Errorf("/readyz with its store: %d, want 200", code)
	}
	sync := func(body string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := sync(`{"protocol_version":1}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first sync: %d %s", resp.StatusCode, body)
	}
	var first struct {
		StoreID    string `json:"store_id"`
		Generation int64  `json:"generation"`
	}
	if err := json.Unmarshal([]byte(body), &first); err != nil {
		t.Fatal(err)
	}
	runDone := make(chan struct{})
	go func() { h.Run(ctx); close(runDone) }()
	defer func() { cancel(); <-runDone }()

	// A poll held here; then the store goes.
	type answer struct {
		resp *http.Response
		body string
	}
	held := make(chan answer, 1)
	go func() {
		r, b := sync(fmt.Sprintf(`{"protocol_version":1,"store_id":%q,"generation":%d}`, first.StoreID, first.Generation))
		held <- answer{r, b}
	}()
	time.Sleep(300 * time.Millisecond)
	broken.mode.Store("fail")
	var a answer
	select {
	case a = <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("a poll held by a replica without its store was not answered")
	}
	if code := readyz(); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without its store: %d, want 503", code)
	}
	// Now the store does not even answer: a sync is still refused at
	// once, not after the store's timeouts.
	broken.mode.Store("hang")
	start := time.Now()
	next := func() answer { r, b := sync(`{"protocol_version":1}`); return answer{r, b} }()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a sync on a replica whose store hangs took %v", d)
	}
	for _, got := range []answer{a, next} {
		if got.resp.StatusCode != http.StatusServiceUnavailable || got.resp.Header.Get("Retry-After") == "" || !got.resp.Close {
			t.Errorf("got %d, Retry-After %q, close %v: want 503 with Retry-After, closing the connection", got.resp.StatusCode, got.resp.Header.Get("Retry-After"), got.resp.Close)
		}
		if strings.Contains(got.body, "10.1.2.3") {
			t.Errorf("the agent was shown the store's address: %s", got.body)
		}
	}
}

// A machine's request whose certificate this replica cannot check (its
// store does not answer: hub.ErrNotReady from identify) is the hub's
// failure: 503 with Retry-After and Connection: close, so the agent moves
// on, never a 401 that keeps it here (issue 18).
func TestUncheckableCertificateSendsTheAgentAway(t *testing.T) {
	api := New(nil, nil, quiet())
	srv := httptest.NewServer(api.SyncHandler(func(*http.Request) (string, error) {
		return "", fmt.Errorf("certificate 0a of machine m-1: %w: this replica cannot reach its store", hub.ErrNotReady)
	}))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"protocol_version":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Fatalf("got %d, Retry-After %q, close %v: %s; want 503 with Retry-After, closing", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Close, b)
	}
	if strings.Contains(string(b), "m-1") {
		t.Errorf("the answer names the hub's internals: %s", b)
	}
}
