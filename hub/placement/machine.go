package placement

import (
	"slices"
	"strconv"
	"strings"

	"einsora.dev/edge/protocol"
)

// Held is what one workload placed on a machine holds there. The controller
// lists the workloads that hold resources now (provisioning, running,
// stopping); a parked workload keeps its disk but holds no CPUs, memory or
// devices.
type Held struct {
	Workload string
	Driver   string
	Kind     protocol.Kind
	// Image is the workload's image, for a driver whose limit counts
	// only some images (Driver.Limited).
	Image    string
	CPUs     int
	MemoryMB int
	Devices  []string
	// Ports are the host ports it publishes.
	Ports []protocol.Port
}

// Machine is a machine as placement sees it. Owner and Region come from its
// registration, never from the agent; Devices and Drivers from its validated
// inventory.
type Machine struct {
	ID     string
	Owner  string
	Region string
	OS     string // GOOS
	Arch   string // GOARCH
	// Online is false for a machine silent for 45 seconds; such a machine is
	// never chosen.
	Online   bool
	CPUs     int
	MemoryMB int
	// Devices maps an accelerator to its device IDs, as
	// DevicesFromInventory makes them.
	Devices map[string][]string
	// Drivers are the drivers the agent offers now.
	Drivers []string
	// Withdrawn are drivers whose limited capacity the machine withdrew
	// (protocol.Inventory.Withdrawn): their limit counts as reached.
	Withdrawn []string
	// Features are the agent's features (protocol.Inventory.Features).
	Features []string
	// Engine is the kind of its Docker engine (EngineOf), "" when it
	// names none.
	Engine string
	// Holding is what the workloads placed on the machine hold.
	Holding []Held
}

// DevicesFromInventory maps an inventory's GPUs to device IDs per
// accelerator: an Apple GPU becomes "apple-gpu:<id>", an NVIDIA one
// "nvidia:<id>" and an AMD one "amd:<id>". GPUs of other vendors, and GPUs
// without an ID (which cannot be reserved), are left out. IDs are sorted and
// unique.
//
// An NVIDIA GPU with MIG enabled, or with a change of MIG mode pending, is
// never offered whole. Its MIG devices are: each is an NVIDIA GPU
// "nvidia:MIG-<uuid>", and one of a whole GPU instance ("1g.10gb", not the
// compute slice "1c.3g.20gb") is also a device of its size's accelerator,
// MIGAccelerator("1g") = "nvidia-mig-1g". Both name the same device, so a
// workload holding it under one holds it under the other.
func DevicesFromInventory(inv protocol.Inventory) map[string][]string {
	var out map[string][]string
	add := func(acc, id string) {
		if out == nil {
			out = make(map[string][]string)
		}
		out[acc] = append(out[acc], id)
	}
	for _, g := range inv.GPUs {
		if g.ID == "" || !reservable(g) {
			continue
		}
		switch strings.ToLower(g.Vendor) {
		case "apple":
			add(AcceleratorAppleGPU, "apple-gpu:"+g.ID)
		case "nvidia":
			add(AcceleratorNvidiaGPU, "nvidia:"+g.ID)
			if size := migSize(g.Profile); g.Parent != "" && size != "" {
				add(MIGAccelerator(size), "nvidia:"+g.ID)
			}
		case "amd":
			add(AcceleratorAMDGPU, "amd:"+g.ID)
		}
	}
	for acc, ids := range out {
		slices.Sort(ids)
		out[acc] = slices.Compact(ids)
	}
	return out
}

// reservable reports whether a GPU may be reserved whole: not one with MIG
// enabled (its MIG devices are reserved instead) nor one whose MIG mode
// changes at its next reset.
func reservable(g protocol.GPU) bool {
	return g.MIGMode != protocol.MIGEnabled && g.MIGMode != protocol.MIGPending
}

// migSize is the size of a whole MIG GPU instance's profile, "1g" of
// "1g.10gb" or "1g.10gb+me"; "" for a compute slice ("1c.3g.20gb") or
// anything else.
func migSize(profile string) string {
	size, _, ok := strings.Cut(profile, ".")
	if !ok || len(size) != 2 || size[1] != 'g' || size[0] < '1' || size[0] > '7' {
		return ""
	}
	return size
}

// EngineOf is the kind of Docker engine an inventory reports, "" for none.
func EngineOf(inv protocol.Inventory) string {
	if inv.Docker == nil {
		return ""
	}
	return inv.Docker.Kind
}

// CanHost reports whether the machine may host w at all: it is the tenant's
// own (until sharing lets a user choose someone else's, ADR-0014) and in the
// workload's region. A machine without an owner hosts nothing.
func (m Machine) CanHost(w Workload) bool {
	return m.Owner != "" && m.Owner == w.Tenant && m.Region == w.Region
}

// Permits reports whether the machine may run w with d: weak isolation is
// only for the machine owner's own workloads.
func (m Machine) Permits(w Workload, d Driver) bool {
	return !d.Weak || (m.Owner != "" && m.Owner == w.Tenant)
}

// Offers reports whether the machine offers d now and d runs on the
// machine's OS and architecture.
func (m Machine) Offers(d Driver) bool {
	return d.FitsPlatform(m.OS, m.Arch) && slices.Contains(m.Drivers, d.Name)
}

// HasFeatures reports whether the machine's agent reports every feature
// in needs.
func (m Machine) HasFeatures(needs []string) bool {
	for _, n := range needs {
		if !slices.Contains(m.Features, n) {
			return false
		}
	}
	return true
}

// Equipped reports whether the machine, empty, would be big enough for c:
// enough devices of its accelerator, CPUs and memory.
func (m Machine) Equipped(c Class) bool {
	return m.equip(&c) == stageFits
}

// Free is what a machine has left after what it holds.
type Free struct {
	CPUs     int
	MemoryMB int
	// Devices maps an accelerator to its free device IDs, sorted.
	Devices map[string][]string
	// Drivers counts the workloads held with each driver.
	Drivers map[string]int
	// Ports holds the host ports taken, by portKey.
	Ports map[string]bool
}

// portKey is a host port as a set keys it: "8080/tcp".
func portKey(p protocol.Port) string { return strconv.Itoa(p.Host) + "/" + p.Protocol() }

// PortsFree reports whether every host port of ports is free.
func (f Free) PortsFree(ports []protocol.Port) bool { return f.takenPort(ports) == nil }

// takenPort returns the first of ports already taken, or nil.
func (f *Free) takenPort(ports []protocol.Port) *protocol.Port {
	for i := range ports {
		if f.Ports[portKey(ports[i])] {
			return &ports[i]
		}
	}
	return nil
}

func (f *Free) takePorts(ports []protocol.Port) {
	if len(ports) == 0 {
		return
	}
	if f.Ports == nil {
		f.Ports = make(map[string]bool)
	}
	for _, p := range ports {
		f.Ports[portKey(p)] = true
	}
}

// Free subtracts what the machine holds from what it has. A held device the
// machine does not list frees nothing; CPUs and memory may go below zero
// when a machine shrank under its workloads.
func (m Machine) Free() Free {
	f := Free{CPUs: m.CPUs, MemoryMB: m.MemoryMB}
	var held map[string]bool // nil until a holding names a device
	for _, h := range m.Holding {
		f.CPUs -= h.CPUs
		f.MemoryMB -= h.MemoryMB
		for _, id := range h.Devices {
			if held == nil {
				held = make(map[string]bool)
			}
			held[id] = true
		}
		if f.Drivers == nil {
			f.Drivers = make(map[string]int)
		}
		f.Drivers[h.Driver]++
		f.takePorts(h.Ports)
	}
	for acc, ids := range m.Devices {
		var free []string
		for _, id := range ids {
			if !held[id] {
				free = append(free, id)
			}
		}
		slices.Sort(free)
		free = slices.Compact(free)
		if len(free) > 0 {
			if f.Devices == nil {
				f.Devices = make(map[string][]string)
			}
			f.Devices[acc] = free
		}
	}
	return f
}

// Fits reports whether c's devices, CPUs and memory are free.
func (f Free) Fits(c Class) bool { return f.lack(&c) == stageFits }

// lack returns the first of c's resources that is not free, as the stage
// that fails, or stageFits.
func (f *Free) lack(c *Class) stage {
	switch {
	case c.Devices > 0 && len(f.Devices[c.accelerator()]) < c.Devices:
		return stageDevicesFree
	case f.CPUs < c.CPUs:
		return stageCPUsFree
	case f.MemoryMB < c.MemoryMB:
		return stageMemoryFree
	}
	return stageFits
}

// devices counts the free devices of every accelerator.
func (f *Free) devices() int {
	n := 0
	for _, ids := range f.Devices {
		n += len(ids)
	}
	return n
}
