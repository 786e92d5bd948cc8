//go:build !linux && !darwin

package inventory

import (
	"context"
	"errors"

	"einsora.dev/edge/protocol"
)

// platformProbers on an OS the agent does not support says so, rather than
// reporting an empty machine.
func platformProbers(recorder) []prober {
	return []prober{{"os", func(context.Context, *Prober) (func(*protocol.Inventory), error) {
		return nil, errors.New("unsupported OS: nothing probed")
	}}}
}
