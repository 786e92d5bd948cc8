package hub

import "fmt"

// checkAgentProtocol refuses an agent whose protocol version this hub (of
// protocol version own) cannot answer. A hub answers its own version and
// the one before it, so upgrades go hubs first, then agents: an agent one
// version behind keeps working, and one ahead of its hub is refused until
// the hub is upgraded.
func checkAgentProtocol(agent, own int) error {
	oldest := max(own-1, 1)
	switch {
	case agent > own:
		return fmt.Errorf("the agent speaks protocol version %d, newer than this hub's %d: upgrade the hub first (hubs before agents)", agent, own)
	case agent < oldest:
		return fmt.Errorf("the agent speaks protocol version %d; this hub speaks %d and answers agents of version %d and newer: upgrade the agent", agent, own, oldest)
	}
	return nil
}
