package trust

import (
	"regexp"
	"strings"

	"einsora.dev/edge/protocol"
)

// migModels are the NVIDIA data-centre GPUs that can be split into MIG
// devices (NVIDIA's MIG user guide, "Supported GPUs"): A100, A30, the
// Hopper H100/H200/H800/H20 and GH200, and the Blackwell B200/B300, GB200/
// GB300 and RTX PRO 6000/5000. A GPU whose model matches none, a GeForce
// say, cannot have a MIG mode.
var migModels = regexp.MustCompile(`(?i)\b(A100|A30|H100|H200|H800|H20|GH200|B100|B200|B300|GB200|GB300|RTX PRO [56]000)\b`)

// migProfile is a MIG profile name: "1g.10gb", "1g.10gb+me", or a compute
// slice of a GPU instance, "1c.3g.20gb".
var migProfile = regexp.MustCompile(`^(?:([1-7])c\.)?([1-7])g\.([0-9]{1,4})gb(?:\+[a-z]{1,8})?$`)

// maxMIGDevices is the most MIG devices one GPU has: seven slices.
const maxMIGDevices = 7

// checkMIG checks MIG modes and MIG devices: a mode only on a GPU that has
// MIG; a device only under a listed NVIDIA GPU with MIG enabled, by a MIG
// UUID, with a valid profile; at most seven per GPU; and no more memory in
// a GPU's MIG instances than in the GPU.
func checkMIG(gpus []protocol.GPU) error {
	parents := map[string]protocol.GPU{}
	for i, g := range gpus {
		switch g.MIGMode {
		case "":
			continue
		case protocol.MIGEnabled, protocol.MIGDisabled, protocol.MIGPending:
		default:
			return broke("gpu-mig", "GPU %d: MIG mode %q is not enabled, disabled or pending", i, g.MIGMode)
		}
		if g.Vendor != "nvidia" || g.Parent != "" || !migModels.MatchString(g.Model) {
			return broke("gpu-mig", "GPU %d: %s %q has no MIG", i, g.Vendor, g.Model)
		}
		parents[g.ID] = g
	}
	count := map[string]int{}
	memory := map[string]int{}
	for i, g := range gpus {
		if g.Parent == "" {
			if g.Profile != "" {
				return broke("gpu-mig", "GPU %d: a MIG profile with no parent", i)
			}
			continue
		}
		parent, ok := parents[g.Parent]
		if g.Vendor != "nvidia" || !ok || parent.MIGMode != protocol.MIGEnabled {
			return broke("gpu-mig", "GPU %d: MIG device of %q, which is not a listed NVIDIA GPU with MIG enabled", i, g.Parent)
		}
		if !strings.HasPrefix(g.ID, "MIG-") {
			return broke("gpu-mig", "GPU %d: MIG device ID %q is not a MIG UUID", i, g.ID)
		}
		m := migProfile.FindStringSubmatch(g.Profile)
		if m == nil {
			return broke("gpu-mig", "GPU %d: MIG profile %q", i, g.Profile)
		}
		count[g.Parent]++
		if count[g.Parent] > maxMIGDevices {
			return broke("gpu-mig", "GPU %q: over %d MIG devices", g.Parent, maxMIGDevices)
		}
		// Compute slices of one GPU instance ("1c.3g.20gb") each report
		// the instance's memory: only whole instances are summed.
		if m[1] == "" {
			memory[g.Parent] += g.MemoryMB
		}
		if parent.MemoryMB > 0 && memory[g.Parent] > parent.MemoryMB {
			return broke("gpu-mig", "GPU %q: its MIG devices have %d MB, more than its %d MB", g.Parent, memory[g.Parent], parent.MemoryMB)
		}
	}
	return nil
}
