package hub

import (
	"strconv"
	"strings"
	"testing"

	"einsora.dev/edge/protocol"
)

func TestAgentProtocolSkew(t *testing.T) {
	for _, tc := range []struct {
		agent, hub int
		ok         bool
	}{
		{agent: 3, hub: 3, ok: true},
		{agent: 2, hub: 3, ok: true}, // one older: agents upgrade after hubs
		{agent: 1, hub: 3},
		{agent: 4, hub: 3},
		{agent: 1, hub: 1, ok: true},
		{agent: 0, hub: 1},
		{agent: 2, hub: 1},
	} {
		err := checkAgentProtocol(tc.agent, tc.hub)
		if (err == nil) != tc.ok {
			t.Errorf("agent %d, hub %d: got %v, want ok=%v", tc.agent, tc.hub, err, tc.ok)
		}
		// A refusal names both versions, so an operator knows which side
		// to upgrade.
		if err != nil && (!strings.Contains(err.Error(), "version "+strconv.Itoa(tc.agent)) || !strings.Contains(err.Error(), strconv.Itoa(tc.hub))) {
			t.Errorf("agent %d, hub %d: %q does not name both versions", tc.agent, tc.hub, err)
		}
	}
	if err := checkAgentProtocol(protocol.Version+1, protocol.Version); err == nil || !strings.Contains(err.Error(), "upgrade the hub first") {
		t.Errorf("a newer agent: got %v, want a refusal saying to upgrade the hub first", err)
	}
}

// The sync path refuses a newer agent as a bad request, with the reason.
func TestSyncRefusesANewerAgent(t *testing.T) {
	err := CheckSyncRequest(&protocol.SyncRequest{ProtocolVersion: protocol.Version + 1})
	if err == nil || !strings.Contains(err.Error(), "newer than this hub's") {
		t.Fatalf("got %v, want a refusal of the newer agent", err)
	}
	if err := CheckSyncRequest(&protocol.SyncRequest{ProtocolVersion: protocol.Version}); err != nil {
		t.Errorf("an agent of the hub's own version: %v", err)
	}
}
