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

// A hub that drains to its own address (it is restarting) gives a window:
// the agent redials after a random part of it, not at once, so the fleet
// spreads its return. A reconnect to another replica stays immediate (the
// test above).
func TestDirectedReconnectToTheSameHubWaitsWithinItsWindow(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	var calls atomic.Int64
	const window = 10 * time.Second
	tr := hubclient.Func(func(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
		switch calls.Add(1) {
		case 1:
			return nil, fmt.Errorf("sync: %w", &hubclient.ReconnectError{To: "https://hub:8443", Window: window})
		case 2:
			return &protocol.SyncResponse{StoreID: "st-1", Generation: 1, Workloads: []protocol.DesiredWorkload{}}, nil
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	startAgent(t, t.TempDir(), newFakeHub(), func(c *Config) {
		c.Transport, c.Clock = tr, clk
	})
	waitFor(t, "the first sync", func() bool { return calls.Load() >= 1 })
	time.Sleep(50 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d syncs before the clock moved; want the redial to wait within the window", n)
	}
	clk.Advance(window)
	waitFor(t, "the redial within the window", func() bool { return calls.Load() >= 2 })
}
