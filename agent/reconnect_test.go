package agent

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// A directed reconnect redials at once; a second one in a row, with no
// sync between, backs off like any failure.
func TestDirectedReconnectRedialsAtOnceButNotForever(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	var calls atomic.Int64
	tr := hubclient.Func(func(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
		switch calls.Add(1) {
		case 1, 2:
			return nil, fmt.Errorf("sync: %w to https://other:8443", hubclient.ErrReconnect)
		case 3:
			return &protocol.SyncResponse{StoreID: "st-1", Generation: 1, Workloads: []protocol.DesiredWorkload{}}, nil
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	startAgent(t, t.TempDir(), newFakeHub(), func(c *Config) {
		c.Transport, c.Clock = tr, clk
		// A backoff always waits its whole ceiling: 1s, then 2s.
		c.Backoff = hubclient.Backoff{Base: time.Second, Rand: func(n int64) int64 { return n - 1 }}
	})
	waitFor(t, "the redial after the first directed reconnect", func() bool { return calls.Load() >= 2 })
	time.Sleep(50 * time.Millisecond)
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d syncs before the clock moved; the second directed reconnect in a row should back off", n)
	}
	clk.Advance(time.Second)
	waitFor(t, "the sync after the backoff", func() bool { return calls.Load() >= 3 })
}
