package agent

import (
	"fmt"
	"sync/atomic"

	"einsora.dev/edge/protocol"
)

// ownProtocol is the protocol version this agent speaks when it checks
// the hub's: protocol.Version, held in a variable so a test can play an
// agent upgraded past its hub while it runs.
var ownProtocol = func() *atomic.Int64 {
	var v atomic.Int64
	v.Store(protocol.Version)
	return &v
}()

// checkHubProtocol refuses the answer of a hub older than this agent (of
// protocol version own) can speak to: hubs answer their own version and
// the one before, so upgrades go hubs first, then agents. The answer is
// refused before anything in it is applied, so the agent keeps running
// what it holds and retries with backoff. Hubs from before the field sent
// zero; they speak version 1.
func checkHubProtocol(hub, own int) error {
	if hub == 0 {
		hub = 1
	}
	if hub < own {
		return fmt.Errorf("the hub speaks protocol version %d, older than this agent's %d: upgrade the hub first (hubs before agents); until then this agent keeps its workloads as they are", hub, own)
	}
	return nil
}
