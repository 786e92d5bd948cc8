// Package hubclient holds the transports an agent syncs over: in-process for
// solo, HTTPS with mutual TLS over the network. Both carry the same call, so
// solo and networked agents run the same agent code.
package hubclient

import (
	"context"

	"einsora.dev/edge/protocol"
)

// Transport carries the one call of the agent protocol. Sync blocks for up
// to the hub's poll timeout when nothing changed; cancelling ctx ends it at
// once (the agent does so to deliver news).
type Transport interface {
	Sync(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error)
}

// Func is an in-process transport: a function that calls the hub directly.
type Func func(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error)

func (f Func) Sync(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
	return f(ctx, req)
}

var _ Transport = Func(nil)
