package agent

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// A hub that refuses the sim driver is told to the owner in the hub's own
// words, at ERROR, once.
func TestSimRefusalIsLoggedAsTheHubSaysIt(t *testing.T) {
	const hubSays = "this hub does not accept the sim driver, which runs nothing; start the agent with real drivers, or the hub with --allow-sim"
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	var calls atomic.Int64
	tr := hubclient.Func(func(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
		calls.Add(1)
		return nil, &hubclient.HubError{Code: http.StatusForbidden, Message: hubSays}
	})
	rec := &records{}
	startAgent(t, t.TempDir(), newFakeHub(), func(c *Config) {
		c.Transport, c.Clock, c.Logger = tr, clk, slog.New(rec)
		c.Backoff = hubclient.Backoff{Base: time.Second, Rand: func(n int64) int64 { return n - 1 }}
	})
	waitFor(t, "two syncs", func() bool {
		clk.Advance(time.Second)
		return calls.Load() >= 2
	})
	if n := rec.count(slog.LevelError, hubSays); n != 1 {
		t.Errorf("%d ERROR records with the hub's words, want exactly 1", n)
	}
}
