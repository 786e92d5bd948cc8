package serve_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hub/serve"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// slowCerts delays, or fails, the certificate lookups made through a store
// while its switch is on: a store the hub waits on, as it does when a
// whole fleet connects at once.
type slowCerts struct {
	store.Store
	on    *atomic.Bool
	delay time.Duration
	fail  error
}

func (s slowCerts) View(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.View(ctx, func(tx store.Tx) error { return fn(slowCertsTx{tx, s}) })
}

type slowCertsTx struct {
	store.Tx
	s slowCerts
}

func (t slowCertsTx) Certificate(serial string) (store.Certificate, error) {
	if t.s.on.Load() {
		time.Sleep(t.s.delay)
		if t.s.fail != nil {
			return store.Certificate{}, t.s.fail
		}
	}
	return t.Tx.Certificate(serial)
}

// Issue 13: the handshake's deadline bounds the peer's time, not the
// hub's. Here the hub's check of the certificate takes longer than the
// whole deadline; the handshake still completes, where with the deadline
// counted from the handshake's slot it was cut and its agent came back
// again and again.
func TestHandshakeDeadlineCountsOnlyThePeersTime(t *testing.T) {
	var slow atomic.Bool
	const timeout = 300 * time.Millisecond
	e := startEnv(t, envOptions{
		pollTimeout: 10 * time.Second,
		limits:      serve.Limits{HandshakeTimeout: timeout},
		wrap:        func(s store.Store) store.Store { return slowCerts{Store: s, on: &slow, delay: 2 * timeout} },
	})
	_, nw := e.enroll()
	slow.Store(true)
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version} // no store ID: answered at once
	tr := nw.Transport()
	if _, err := tr.Sync(context.Background(), req); err != nil {
		t.Fatalf("sync over a handshake the hub was slow to check: %v", err)
	}
	// The handshake's deadline ends with it: the connection serves on.
	slow.Store(false)
	time.Sleep(2 * timeout)
	if _, err := tr.Sync(context.Background(), req); err != nil {
		t.Fatalf("sync on the same connection past the handshake's deadline: %v", err)
	}
}

// Issue 13: a store that fails while the hub checks a handshake's
// certificate is the hub's failure: the handshake is not refused (the
// agent would read a refused certificate as a revoked one); the request,
// checked again, is sent away with a Retry-After.
func TestHandshakeNotRefusedWhenTheStoreFails(t *testing.T) {
	var failing atomic.Bool
	e := startEnv(t, envOptions{
		pollTimeout: 10 * time.Second,
		wrap: func(s store.Store) store.Store {
			return slowCerts{Store: s, on: &failing, fail: errors.New("disk I/O error")}
		},
	})
	_, nw := e.enroll()
	failing.Store(true)
	tr := nw.Transport()
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version}
	_, err := tr.Sync(context.Background(), req)
	var refused *hubclient.TLSRefusedError
	if errors.As(err, &refused) {
		t.Fatalf("sync while the store fails: %v; want the hub's own failure, not a refused certificate", err)
	}
	var he *hubclient.HubError
	if !errors.As(err, &he) || he.Code != http.StatusServiceUnavailable || he.RetryAfter < time.Second {
		t.Fatalf("sync while the store fails: %v; want 503 with a Retry-After", err)
	}
	failing.Store(false)
	if _, err := tr.Sync(context.Background(), req); err != nil {
		t.Fatalf("sync once the store answers: %v", err)
	}
}
