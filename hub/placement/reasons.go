package placement

import (
	"fmt"
	"strings"

	"einsora.dev/edge/protocol"
)

// reason turns the stage a placement failed at into a sentence for the
// workload's timeline; driver is the driver at its limit at stageLimit.
func (f *Fleet) reason(s stage, driver int, w *Workload, c *Class) *NoFit {
	nf := f.reasonText(s, driver, w, c)
	nf.Code = s.code()
	return nf
}

// Codes are the values of NoFit.Code.
var Codes = []string{"no_machine", "accelerator", "size", "driver", "isolation", "agent_too_old", "offline", "driver_limit", "devices_busy", "cpus_busy", "memory_busy", "ports_busy"}

// code is the stage's entry in Codes.
func (s stage) code() string {
	if s < 0 || int(s) >= len(Codes) {
		return Codes[len(Codes)-1]
	}
	return Codes[s]
}

func (f *Fleet) reasonText(s stage, driver int, w *Workload, c *Class) *NoFit {
	if w.Sticky() {
		return f.stickyReason(s, driver, w, c)
	}
	where := "no machine of tenant " + w.Tenant + inRegion(w.Region)
	switch s {
	case stageHost:
		return noFit("tenant %s has no machine%s", w.Tenant, inRegion(w.Region))
	case stageOnline:
		return noFit("%s that could run it is online", where)
	case stageAccelerator:
		return noFit("%s has %s", where, devicesPhrase(c, false))
	case stageSize:
		return noFit("%s is big enough for %s", where, classPhrase(c))
	case stageDriver:
		return noFit("%s offers a driver that runs %s", where, workPhrase(w.Kind, c))
	case stagePermit:
		return noFit("%s offers a driver isolated enough to run %s for a tenant other than its owner", where, workPhrase(w.Kind, c))
	case stageFeature:
		return noFit("%s runs an agent new enough for it (it needs agent features %s; upgrade einsora-agent)", where, strings.Join(w.Needs, ", "))
	case stageLimit:
		d := f.drivers[driver]
		return noFit("%s can run another %s workload (%d per machine)", where, d.Name, d.PerMachineLimit)
	case stageDevicesFree:
		return noFit("%s has %s", where, devicesPhrase(c, true))
	case stageCPUsFree:
		return noFit("%s has %s", where, cpusPhrase(c.CPUs))
	case stagePortsFree:
		return noFit("%s has %s free", where, portsPhrase(w.Ports))
	default: // stageMemoryFree
		return noFit("%s has %d MB of memory free", where, c.MemoryMB)
	}
}

func (f *Fleet) stickyReason(s stage, driver int, w *Workload, c *Class) *NoFit {
	m := "machine " + w.HeldMachine + ", which holds its disk,"
	switch s {
	case stageHost:
		return noFit("%s is not tenant %s's machine%s", m, w.Tenant, inRegion(w.Region))
	case stageOnline:
		return noFit("waiting for %s to come online", m)
	case stageAccelerator:
		if c.Devices == 1 {
			return noFit("%s has no %s", m, acceleratorName(c.accelerator()))
		}
		return noFit("%s has fewer than %s", m, devicesPhrase(c, false))
	case stageSize:
		return noFit("%s is too small for %s", m, classPhrase(c))
	case stageDriver:
		if w.HeldDriver != "" {
			return noFit("waiting for %s to offer driver %s", m, w.HeldDriver)
		}
		return noFit("waiting for %s to offer a driver that runs %s", m, workPhrase(w.Kind, c))
	case stagePermit:
		return noFit("%s offers no driver isolated enough to run %s for a tenant other than its owner", m, workPhrase(w.Kind, c))
	case stageFeature:
		return noFit("waiting for %s to run an agent new enough for it (it needs agent features %s; upgrade einsora-agent there)", m, strings.Join(w.Needs, ", "))
	case stageLimit:
		d := f.drivers[driver]
		return noFit("waiting for %s to run fewer than %d %s workloads", m, d.PerMachineLimit, d.Name)
	case stageDevicesFree:
		return noFit("waiting for %s to have %s", m, devicesPhrase(c, true))
	case stageCPUsFree:
		return noFit("waiting for %s to have %s", m, cpusPhrase(c.CPUs))
	case stagePortsFree:
		return noFit("waiting for %s to have %s free", m, portsPhrase(w.Ports))
	default: // stageMemoryFree
		return noFit("waiting for %s to have %d MB of memory free", m, c.MemoryMB)
	}
}

func inRegion(region string) string {
	if region == "" {
		return ""
	}
	return " in region " + region
}

// acceleratorName is how a reason names one device of an accelerator.
func acceleratorName(acc string) string {
	switch acc {
	case AcceleratorAppleGPU:
		return "Apple GPU"
	case AcceleratorNvidiaGPU:
		return "NVIDIA GPU"
	case AcceleratorAMDGPU:
		return "AMD GPU"
	}
	if size, ok := strings.CutPrefix(acc, migAcceleratorPrefix); ok {
		return "NVIDIA MIG " + size + " device"
	}
	return acc + " device"
}

// article is "a" or "an" for a name as it is read aloud; the GPU vendors'
// names are read by their letters or start with a vowel.
func article(name string) string {
	if name == "" {
		return "a"
	}
	switch strings.ToLower(name[:1]) {
	case "a", "e", "i", "o", "u":
		return "an"
	}
	if strings.HasPrefix(name, "NVIDIA") {
		return "an"
	}
	return "a"
}

// devicesPhrase: "an Apple GPU", "a free Apple GPU", "2 free NVIDIA GPUs".
func devicesPhrase(c *Class, free bool) string {
	name := acceleratorName(c.accelerator())
	adj := ""
	if free {
		adj = "free "
	}
	if c.Devices == 1 {
		return article(adj+name) + " " + adj + name
	}
	return fmt.Sprintf("%d %s%ss", c.Devices, adj, name)
}

func cpusPhrase(n int) string {
	if n == 1 {
		return "a free CPU"
	}
	return fmt.Sprintf("%d free CPUs", n)
}

// classPhrase: "class cpu-4 (4 CPUs, 8192 MB of memory)".
func classPhrase(c *Class) string {
	cpus := "CPUs"
	if c.CPUs == 1 {
		cpus = "CPU"
	}
	return fmt.Sprintf("class %s (%d %s, %d MB of memory)", c.Name, c.CPUs, cpus, c.MemoryMB)
}

var kindNames = map[protocol.Kind]string{
	protocol.KindContainer: "a container",
	protocol.KindVM:        "a VM",
	protocol.KindNotebook:  "a notebook",
	protocol.KindEndpoint:  "an endpoint",
}

// workPhrase: "a VM", "a notebook with an Apple GPU".
func workPhrase(k protocol.Kind, c *Class) string {
	s, ok := kindNames[k]
	if !ok {
		s = article(string(k)) + " " + string(k)
	}
	if acc := c.accelerator(); acc != AcceleratorNone {
		name := acceleratorName(acc)
		s += " with " + article(name) + " " + name
	}
	return s
}

// portsPhrase: "host port 8080/tcp", "host ports 8080/tcp and 53/udp".
func portsPhrase(ports []protocol.Port) string {
	keys := make([]string, len(ports))
	for i, p := range ports {
		keys[i] = portKey(p)
	}
	switch len(keys) {
	case 0:
		return "no host port"
	case 1:
		return "host port " + keys[0]
	}
	return "host ports " + strings.Join(keys[:len(keys)-1], ", ") + " and " + keys[len(keys)-1]
}
