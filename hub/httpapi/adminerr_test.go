package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/store/sqlite"
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

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
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
	var log lockedBuffer
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
