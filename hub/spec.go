package hub

import (
	"fmt"
	"reflect"

	"einsora.dev/edge/protocol"
)

// sealSpec checks a user's spec and seals its secrets for workload id:
// what the store may hold. Every refusal names the field and wraps
// ErrInvalid, and none quotes a secret.
func (h *Hub) sealSpec(id string, spec protocol.WorkloadSpec) (protocol.WorkloadSpec, error) {
	if err := spec.Validate(); err != nil {
		return protocol.WorkloadSpec{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return h.secrets.seal(id, spec)
}

// openSpec is a workload's sealed spec as its machine must see it,
// secrets opened: only desired state holds it. A secret that does not
// open (a replica without the shared key) parks the workload rather than
// run it without its secrets; the error is logged without any value.
func (h *Hub) openSpec(workloadID string, sealed protocol.WorkloadSpec, mode protocol.Mode) (protocol.WorkloadSpec, protocol.Mode) {
	spec, err := h.secrets.open(workloadID, sealed)
	if err != nil {
		h.log.Error("workload's secrets do not open; it is parked on its machine", "workload", workloadID, "err", err)
		spec = sealed
		spec.SecretEnv = nil
		if mode == protocol.ModeRun {
			mode = protocol.ModePark
		}
	}
	return spec, mode
}

// specNeeds is what a workload's spec asks of placement: its host ports,
// and the agent feature "spec" when there is a spec at all, since an older
// agent would run the bare image.
func specNeeds(spec protocol.WorkloadSpec) ([]protocol.Port, []string) {
	if reflect.DeepEqual(spec, protocol.WorkloadSpec{}) {
		return nil, nil
	}
	return spec.Ports, []string{protocol.FeatureSpec}
}
