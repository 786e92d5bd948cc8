package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// A revoked machine says so once, at ERROR, with what to do; it then asks
// the hub again only every RevokedRetry, and `status` and `doctor` say it
// is revoked until the hub accepts it again.
func TestRevokedMachineSaysSoOnceAndRetriesSlowly(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	var calls atomic.Int64
	var accept atomic.Bool
	tr := hubclient.Func(func(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
		n := calls.Add(1)
		switch {
		case accept.Load() && req.Generation == 0:
			return &protocol.SyncResponse{StoreID: "st-1", Generation: 1, Workloads: []protocol.DesiredWorkload{}}, nil
		case accept.Load():
			<-ctx.Done()
			return nil, ctx.Err()
		case n == 1:
			return nil, &hubclient.HubError{Code: http.StatusForbidden, Message: "machine revoked; an operator revoked this machine"}
		}
		// Later handshakes are refused outright, as the hub does.
		return nil, &hubclient.TLSRefusedError{Alert: "bad certificate", Err: errors.New("remote error: tls: bad certificate")}
	})
	dir := t.TempDir()
	rec := &records{}
	startAgent(t, dir, newFakeHub(), func(c *Config) {
		c.Transport, c.Clock, c.Logger = tr, clk, slog.New(rec)
		c.Backoff = hubclient.Backoff{Base: time.Second, Rand: func(n int64) int64 { return n - 1 }}
	})
	waitFor(t, "the first sync", func() bool { return calls.Load() >= 1 })
	// A normal failure would retry within seconds; a revoked machine waits.
	for range 4 {
		time.Sleep(20 * time.Millisecond)
		clk.Advance(time.Minute)
	}
	time.Sleep(20 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d syncs within 4 minutes of the revocation, want 1", n)
	}
	clk.Advance(time.Minute)
	waitFor(t, "the retry after 5 minutes", func() bool { return calls.Load() >= 2 })
	// That retry's handshake was refused outright: still revoked, so still
	// slow.
	time.Sleep(20 * time.Millisecond)
	clk.Advance(time.Minute)
	time.Sleep(20 * time.Millisecond)
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d syncs a minute after a refused handshake of a revoked machine, want 2", n)
	}
	clk.Advance(RevokedRetry - time.Minute)
	waitFor(t, "the third try", func() bool { return calls.Load() >= 3 })
	for range 2 {
		time.Sleep(20 * time.Millisecond)
		clk.Advance(RevokedRetry)
	}
	waitFor(t, "more retries", func() bool { return calls.Load() >= 5 })
	if n := rec.count(slog.LevelError, "revoked"); n != 1 {
		t.Errorf("%d ERROR records about the revocation, want exactly 1", n)
	}
	if attrs, ok := rec.find(slog.LevelError, "revoked"); !ok || !strings.Contains(attrs["err"], "403") {
		t.Errorf("the ERROR has attributes %v, want the hub's answer", attrs)
	}
	msg := ""
	rec.mu.Lock()
	for _, r := range rec.got {
		if r.Level == slog.LevelError {
			msg = r.Message
		}
	}
	rec.mu.Unlock()
	if !strings.Contains(msg, "enrol again with a new token: einsora-agent enroll --hub") {
		t.Errorf("the ERROR %q does not say what to do", msg)
	}

	st, err := ReadStatus(dir)
	if err != nil || st.Revoked == nil || !strings.Contains(st.Revoked.Message, "einsora-agent enroll") {
		t.Errorf("status: %+v, %v; want it revoked with the fix", st.Revoked, err)
	}
	v := verdicts(t, Doctor(context.Background(), DoctorConfig{StateDir: dir}))
	if v["revocation"] != Fail {
		t.Errorf("doctor's revocation check: %s, want fail", v["revocation"])
	}

	// Accepted again (the revocation undone, or a restored hub): status
	// and doctor stop saying revoked.
	accept.Store(true)
	time.Sleep(20 * time.Millisecond)
	clk.Advance(RevokedRetry)
	waitFor(t, "the revocation cleared", func() bool {
		st, _ := ReadStatus(dir)
		return st.Revoked == nil
	})
	if v := verdicts(t, Doctor(context.Background(), DoctorConfig{StateDir: dir})); v["revocation"] != OK {
		t.Errorf("doctor after acceptance: %s", v["revocation"])
	}
}
