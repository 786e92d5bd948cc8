package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// errBusy: an earlier call on the same key overran its time limit and has
// not returned yet; nothing more is asked of the driver for that key until
// it does.
var errBusy = errors.New("an earlier driver call has not returned yet")

// errTimeout: the call overran its time limit.
var errTimeout = errors.New("driver call timed out")

// calls bounds driver calls in time. A driver that ignores its context
// cannot hold up the apply loop: the loop stops waiting at the limit, and
// the key stays busy until the stray call returns, so two calls never
// overlap on one workload.
type calls struct {
	// mu guards busy.
	mu   sync.Mutex
	busy map[string]bool
}

func (c *calls) do(ctx context.Context, key string, limit time.Duration, fn func(context.Context) error) error {
	c.mu.Lock()
	if c.busy[key] {
		c.mu.Unlock()
		return errBusy
	}
	c.busy[key] = true
	c.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, limit)
	done := make(chan error, 1)
	go func() { done <- fn(cctx) }()
	release := func() {
		cancel()
		c.mu.Lock()
		delete(c.busy, key)
		c.mu.Unlock()
	}
	select {
	case err := <-done:
		release()
		return err
	case <-cctx.Done():
		go func() {
			<-done
			release()
		}()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w after %s", errTimeout, limit)
	}
}

// isBusy reports whether a call on key overran its limit and is still out.
func (c *calls) isBusy(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.busy[key]
}
