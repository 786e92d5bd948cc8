// Package placement decides where a workload runs: on which machine, with
// which driver and which devices. It is the one place placement rules live
// (ADR-0016, architecture rule 5), pure Go with no I/O: the controller loads
// machines and workloads from the store, asks Place (or a Fleet, for a whole
// admit pass), and records the Decision.
//
// The rules, in the order a machine is checked against them:
//
//  1. the machine is the tenant's own and in the workload's region
//     (Machine.CanHost);
//  2. it has the class's accelerator devices, CPUs and memory at all
//     (Machine.Equipped);
//  3. a driver from the hub's table runs the workload's kind on the class's
//     accelerator (Driver.Runs), runs on the machine's OS and architecture
//     and is offered by it (Machine.Offers), and isolates strongly enough
//     for who owns the machine (Machine.Permits);
//  4. its agent reports every feature the workload needs
//     (Machine.HasFeatures: a workload with a spec needs "spec");
//  5. the machine is online;
//  6. the driver is under its per-machine limit (Driver.Allows);
//  7. the class's devices, CPUs and memory are free (Free.Fits), and so
//     are the workload's published host ports (Free.PortsFree);
//  8. a VM or notebook that has run before (Workload.Sticky) goes back to
//     the machine and driver holding its disk, or waits: it is never placed
//     elsewhere, so it never runs in two places. Offline machines are never
//     chosen, and a workload already holding a machine is not placed again.
//
// Among the machines that pass, Place takes the best fit: the one left with
// the fewest free accelerator devices, then the fewest free CPUs, then the
// least free memory, then the lowest ID, so that big machines and GPUs stay
// free for workloads that need them. On that machine it takes the driver with
// the strongest isolation (a strong driver before a weak one at the same
// level, then by name), and the lowest-sorted free device IDs.
//
// When nothing fits, the error is a *NoFit whose Reason names the most
// specific rule that failed: the one that failed on the machine that came
// closest to fitting.
//
// A controller admitting many workloads in one pass uses a Fleet: NewFleet
// sums what every machine holds once, and Fleet.Place places and holds each
// workload in turn, answering exactly as Place would.
package placement

import (
	"fmt"

	"einsora.dev/edge/protocol"
)

// Class is what a workload reserves on its machine.
type Class struct {
	Name string
	// Accelerator is the kind of device it needs; "" reads as
	// AcceleratorNone.
	Accelerator string
	// Devices is how many devices of Accelerator it reserves.
	Devices  int
	CPUs     int
	MemoryMB int
}

// DefaultClasses are the classes a new hub starts with.
var DefaultClasses = []Class{
	{Name: "cpu-1", Accelerator: AcceleratorNone, CPUs: 1, MemoryMB: 2048},
	{Name: "cpu-2", Accelerator: AcceleratorNone, CPUs: 2, MemoryMB: 4096},
	{Name: "cpu-4", Accelerator: AcceleratorNone, CPUs: 4, MemoryMB: 8192},
	{Name: "apple-gpu", Accelerator: AcceleratorAppleGPU, Devices: 1, CPUs: 4, MemoryMB: 16384},
	{Name: "nvidia-1", Accelerator: AcceleratorNvidiaGPU, Devices: 1, CPUs: 4, MemoryMB: 16384},
	{Name: "nvidia-mig-1g", Accelerator: AcceleratorNvidiaMIG1g, Devices: 1, CPUs: 2, MemoryMB: 8192},
}

func (c Class) accelerator() string {
	if c.Accelerator == "" {
		return AcceleratorNone
	}
	return c.Accelerator
}

func (c Class) valid() bool {
	if c.Devices < 0 || c.CPUs < 0 || c.MemoryMB < 0 {
		return false
	}
	return c.accelerator() != AcceleratorNone || c.Devices == 0
}

// Workload is a workload waiting to be placed.
type Workload struct {
	ID     string
	Tenant string
	Region string
	Kind   protocol.Kind
	Class  string
	// Image matters to placement only where a driver's limit counts some
	// images (vz: macOS guests).
	Image string
	// HeldMachine and HeldDriver are where the workload last ran, empty
	// if it never has. A VM or notebook keeps its disk there, so it is
	// placed only there, and only with HeldDriver when that is set; it
	// waits rather than run anywhere else. Other kinds may move.
	HeldMachine string
	HeldDriver  string
	// Ports are the host ports it publishes: a machine where another
	// workload holding resources publishes one of them does not fit.
	Ports []protocol.Port
	// Needs are the agent features it needs (protocol.FeatureSpec for a
	// workload with a spec): an older agent would run it wrongly.
	Needs []string
}

// Sticky reports whether w must go back to the machine holding its disk: it
// is a VM or notebook that has run before (ADR-0016).
func (w Workload) Sticky() bool {
	return w.HeldMachine != "" && (w.Kind == protocol.KindVM || w.Kind == protocol.KindNotebook)
}

// Decision is where a workload goes.
type Decision struct {
	Machine string
	Driver  string
	// Isolation is the driver's isolation from the hub's table: the least
	// the workload needs, as desired state tells the agent.
	Isolation protocol.Isolation
	// Devices are the device IDs reserved, e.g. "apple-gpu:0".
	Devices []string
}

// NoFit says why a workload cannot be placed now. Reason is a sentence for
// the workload's timeline, e.g. "no machine of tenant acme in region eu-west
// has a free Apple GPU".
type NoFit struct {
	Reason string
	// Code names the rule no machine passed, one of a small fixed set
	// (Codes), for metrics' labels.
	Code string
}

func (e *NoFit) Error() string { return e.Reason }

func noFit(format string, args ...any) *NoFit {
	return &NoFit{Reason: fmt.Sprintf(format, args...)}
}

// Place decides where w, of class c, runs among machines, with the driver
// table drivers (normally DefaultDrivers). Every error it returns is a
// *NoFit. Pass offline machines too (Online false): they are never chosen,
// but they make reasons more precise. It is NewFleet(machines,
// drivers).Place(w, c); a controller placing many workloads in one pass
// should keep the Fleet.
func Place(w Workload, c Class, machines []Machine, drivers []Driver) (Decision, error) {
	return NewFleet(machines, drivers).Place(w, c)
}

// stage is a rule a machine can fail, in the order they are checked. The
// stage a machine reaches says how close it came; the highest stage reached
// by any machine gives the reason.
type stage int

const (
	stageHost stage = iota
	stageAccelerator
	stageSize
	stageDriver
	stagePermit
	stageFeature
	stageOnline
	stageLimit
	stageDevicesFree
	stageCPUsFree
	stageMemoryFree
	stagePortsFree
	stageFits
)

// equip is Machine.Equipped, saying which part is missing.
func (m *Machine) equip(c *Class) stage {
	switch {
	case len(m.Devices[c.accelerator()]) < c.Devices:
		return stageAccelerator
	case m.CPUs < c.CPUs || m.MemoryMB < c.MemoryMB:
		return stageSize
	}
	return stageFits
}
