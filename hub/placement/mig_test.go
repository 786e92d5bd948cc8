package placement

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"einsora.dev/edge/protocol"
)

// migInventory is an A100 split into a 3g and two 1g MIG devices, an A100
// whose MIG mode changes at its next reset, and one with MIG off.
func migInventory() protocol.Inventory {
	return protocol.Inventory{GPUs: []protocol.GPU{
		{Vendor: "nvidia", ID: "GPU-a", MemoryMB: 40960, MIGMode: protocol.MIGEnabled},
		{Vendor: "nvidia", ID: "MIG-a3", Parent: "GPU-a", Profile: "3g.20gb", MemoryMB: 19968},
		{Vendor: "nvidia", ID: "MIG-a1x", Parent: "GPU-a", Profile: "1g.5gb", MemoryMB: 4864},
		{Vendor: "nvidia", ID: "MIG-a1y", Parent: "GPU-a", Profile: "1g.5gb+me", MemoryMB: 4864},
		{Vendor: "nvidia", ID: "GPU-p", MemoryMB: 40960, MIGMode: protocol.MIGPending},
		{Vendor: "nvidia", ID: "GPU-w", MemoryMB: 40960, MIGMode: protocol.MIGDisabled},
	}}
}

func TestDevicesFromInventoryMIG(t *testing.T) {
	got := DevicesFromInventory(migInventory())
	want := map[string][]string{
		AcceleratorNvidiaGPU:   {"nvidia:GPU-w", "nvidia:MIG-a1x", "nvidia:MIG-a1y", "nvidia:MIG-a3"},
		AcceleratorNvidiaMIG1g: {"nvidia:MIG-a1x", "nvidia:MIG-a1y"},
		MIGAccelerator("3g"):   {"nvidia:MIG-a3"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestPlaceMIG places nvidia-1 and nvidia-mig-1g on MIG devices: never on a
// MIG-enabled or pending parent, and a device held under one class is not
// free under the other.
func TestPlaceMIG(t *testing.T) {
	m := linux("m-1", "acme", "r", 0)
	inv := migInventory()
	inv.GPUs = slices.DeleteFunc(inv.GPUs, func(g protocol.GPU) bool { return g.ID == "GPU-w" })
	m.Devices = DevicesFromInventory(inv)
	mig1g := class(t, "nvidia-mig-1g")
	nv1 := class(t, "nvidia-1")

	d, err := Place(wl("w1", "acme", "r", protocol.KindContainer, "nvidia-mig-1g"), mig1g, []Machine{m}, DefaultDrivers)
	if err != nil || !reflect.DeepEqual(d.Devices, []string{"nvidia:MIG-a1x"}) || d.Driver != "docker" {
		t.Fatalf("nvidia-mig-1g: got %+v, %v; want docker on nvidia:MIG-a1x", d, err)
	}
	m.Holding = append(m.Holding, Held{Workload: "w1", Driver: d.Driver, CPUs: mig1g.CPUs, MemoryMB: mig1g.MemoryMB, Devices: d.Devices})

	d, err = Place(wl("w2", "acme", "r", protocol.KindContainer, "nvidia-1"), nv1, []Machine{m}, DefaultDrivers)
	if err != nil || !reflect.DeepEqual(d.Devices, []string{"nvidia:MIG-a1y"}) {
		t.Fatalf("nvidia-1: got %+v, %v; want nvidia:MIG-a1y", d, err)
	}
	m.Holding = append(m.Holding, Held{Workload: "w2", Driver: d.Driver, CPUs: nv1.CPUs, MemoryMB: nv1.MemoryMB, Devices: d.Devices})

	_, err = Place(wl("w3", "acme", "r", protocol.KindContainer, "nvidia-mig-1g"), mig1g, []Machine{m}, DefaultDrivers)
	var nf *NoFit
	if !errors.As(err, &nf) || !strings.Contains(nf.Reason, "NVIDIA MIG 1g device") {
		t.Fatalf("third 1g: got %v, want no fit naming the NVIDIA MIG 1g device", err)
	}
	d, err = Place(wl("w4", "acme", "r", protocol.KindContainer, "nvidia-1"), nv1, []Machine{m}, DefaultDrivers)
	if err != nil || !reflect.DeepEqual(d.Devices, []string{"nvidia:MIG-a3"}) {
		t.Fatalf("last nvidia-1: got %+v, %v; want nvidia:MIG-a3, never a parent", d, err)
	}
}
