package trust

import (
	"errors"
	"fmt"
	"testing"

	"einsora.dev/edge/protocol"
)

// migBox is an H100 split into a 3g and two 1g MIG devices, beside an H100
// with MIG off, as the agent reports them.
func migBox() *protocol.Inventory {
	inv := linuxGPUBox()
	inv.GPUs[0].MIGMode = protocol.MIGEnabled
	inv.GPUs[1].MIGMode = protocol.MIGDisabled
	parent := inv.GPUs[0].ID
	inv.GPUs = append(inv.GPUs,
		protocol.GPU{Vendor: "nvidia", Model: "NVIDIA H100 80GB HBM3", ID: "MIG-0a4c2e1f-7b3d-5e9a-8c6f-1d2b3a4c5e6f", MemoryMB: 40192, Parent: parent, Profile: "3g.40gb"},
		protocol.GPU{Vendor: "nvidia", Model: "NVIDIA H100 80GB HBM3", ID: "MIG-1b5d3f2a-8c4e-5f0b-9d7a-2e3c4b5d6f7a", MemoryMB: 9856, Parent: parent, Profile: "1g.10gb"},
		protocol.GPU{Vendor: "nvidia", Model: "NVIDIA H100 80GB HBM3", ID: "MIG-2c6e4a3b-9d5f-5a1c-8e8b-3f4d5c6e7a8b", MemoryMB: 9856, Parent: parent, Profile: "1g.10gb+me"},
	)
	return inv
}

func TestCheckMIG(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(inv *protocol.Inventory)
		wantRule string
	}{
		{"valid", func(*protocol.Inventory) {}, ""},
		{"pending_parent_without_devices", func(inv *protocol.Inventory) {
			inv.GPUs = inv.GPUs[:2]
			inv.GPUs[0].MIGMode = protocol.MIGPending
		}, ""},
		{"compute_slices_share_memory", func(inv *protocol.Inventory) {
			for i := 2; i < 5; i++ {
				inv.GPUs[i].Profile, inv.GPUs[i].MemoryMB = "1c.7g.80gb", 81000
			}
		}, ""},
		{"devices_over_parent_memory", func(inv *protocol.Inventory) { inv.GPUs[2].MemoryMB = 70000 }, "gpu-mig"},
		{"mig_on_geforce", func(inv *protocol.Inventory) {
			for i := range inv.GPUs {
				inv.GPUs[i].Model = "NVIDIA GeForce RTX 4090"
			}
		}, "gpu-mig"},
		{"mig_on_amd", func(inv *protocol.Inventory) { inv.GPUs[1].Vendor = "amd" }, "gpu-mig"},
		{"unknown_mode", func(inv *protocol.Inventory) { inv.GPUs[1].MIGMode = "on" }, "gpu-mig"},
		{"device_of_parent_not_listed", func(inv *protocol.Inventory) { inv.GPUs[3].Parent = "GPU-nope" }, "gpu-mig"},
		{"device_of_parent_with_mig_off", func(inv *protocol.Inventory) { inv.GPUs[3].Parent = inv.GPUs[1].ID }, "gpu-mig"},
		{"device_of_pending_parent", func(inv *protocol.Inventory) { inv.GPUs[0].MIGMode = protocol.MIGPending }, "gpu-mig"},
		{"device_not_a_mig_uuid", func(inv *protocol.Inventory) { inv.GPUs[3].ID = "GPU-3" }, "gpu-mig"},
		{"bad_profile", func(inv *protocol.Inventory) { inv.GPUs[3].Profile = "9g.1000000gb" }, "gpu-mig"},
		{"profile_without_parent", func(inv *protocol.Inventory) { inv.GPUs[1].Profile = "1g.10gb" }, "gpu-mig"},
		{"mig_device_with_a_mode", func(inv *protocol.Inventory) { inv.GPUs[3].MIGMode = protocol.MIGEnabled }, "gpu-mig"},
		{"eight_devices", func(inv *protocol.Inventory) {
			for i := range 5 {
				inv.GPUs = append(inv.GPUs, protocol.GPU{Vendor: "nvidia", ID: fmt.Sprintf("MIG-x%d", i), Parent: inv.GPUs[0].ID, Profile: "1g.10gb"})
			}
		}, "gpu-mig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := migBox()
			tt.edit(inv)
			err := CheckInventory("linux", "amd64", inv, driverTable)
			var re *RuleError
			switch {
			case tt.wantRule == "" && err != nil:
				t.Fatalf("got %v, want none", err)
			case tt.wantRule != "" && (!errors.As(err, &re) || re.Rule != tt.wantRule):
				t.Fatalf("got %v, want rule %s", err, tt.wantRule)
			}
		})
	}
}
