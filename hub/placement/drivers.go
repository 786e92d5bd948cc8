package placement

import (
	"slices"
	"strings"

	"einsora.dev/edge/protocol"
)

// Accelerators a class can ask for and a driver can drive. A class without
// an accelerator asks for AcceleratorNone.
const (
	AcceleratorNone      = "none"
	AcceleratorAppleGPU  = "apple-gpu"
	AcceleratorNvidiaGPU = "nvidia-gpu"
	AcceleratorAMDGPU    = "amd-gpu"
	// AcceleratorNvidiaMIG1g is a MIG device of one slice ("1g.10gb" on
	// an A100 80GB or H100, "1g.18gb" on an H200): MIGAccelerator("1g").
	AcceleratorNvidiaMIG1g = "nvidia-mig-1g"
)

// migAcceleratorPrefix starts the accelerators of NVIDIA MIG devices by
// size: "nvidia-mig-1g" ... "nvidia-mig-7g".
const migAcceleratorPrefix = "nvidia-mig-"

// MIGAccelerator is the accelerator of MIG devices of size "1g" ... "7g".
func MIGAccelerator(size string) string { return migAcceleratorPrefix + size }

// Driver is a row of the hub's driver table. Everything in it is the hub's
// word, never the agent's: an agent only says which drivers it offers.
type Driver struct {
	Name string
	// OS and Arch are the GOOS and GOARCH the driver runs on; "" means any.
	OS   string
	Arch string
	// Isolation is how strongly the driver separates a workload from its
	// host. The hub sends it with the workload; an agent whose driver
	// gives less refuses it.
	Isolation protocol.Isolation
	// Weak marks isolation that is only good enough for the machine
	// owner's own workloads (macos-native, plain docker).
	Weak bool
	// Kinds are the kinds of workload it runs.
	Kinds []protocol.Kind
	// Accelerators are those it can give a workload, AcceleratorNone
	// included when it runs workloads without one.
	Accelerators []string
	// PerMachineLimit caps how many workloads one machine holds with this
	// driver at once; 0 means no cap.
	PerMachineLimit int
	// Engines, for a driver over the Docker API, are the kinds of workload
	// it runs on each engine that may answer that API (protocol.Engine*);
	// an engine not listed runs none. nil: the driver needs no engine.
	// A machine whose inventory names no engine kind counts as Docker.
	Engines map[string][]protocol.Kind
	// Limited, when set, says by its image which workloads the limit
	// counts and caps; nil means every workload of the driver.
	Limited func(image string) bool
}

// DefaultDrivers is the hub's driver table.
//
// sim is for development: it runs every kind with every accelerator and
// claims VM isolation so it never blocks a rule. An agent offers it only when
// told to (--drivers sim), but the hub cannot tell an honest agent from a
// hostile one, so a hub that places other tenants' workloads (sharing) should
// drop sim from its table.
var DefaultDrivers = []Driver{
	{
		Name: "docker", OS: "linux",
		Isolation: protocol.IsolationContainer, Weak: true,
		Kinds:        []protocol.Kind{protocol.KindContainer, protocol.KindNotebook, protocol.KindEndpoint},
		Accelerators: []string{AcceleratorNone, AcceleratorNvidiaGPU},
		// Podman's Docker-compatible API runs plain containers; the
		// volumes and long-lived ports notebooks and endpoints rely on
		// are not tried there yet.
		Engines: map[string][]protocol.Kind{
			protocol.EngineDocker:        {protocol.KindContainer, protocol.KindNotebook, protocol.KindEndpoint},
			protocol.EngineDockerDesktop: {protocol.KindContainer, protocol.KindNotebook, protocol.KindEndpoint},
			protocol.EnginePodman:        {protocol.KindContainer},
		},
	},
	{
		// Docker with the gVisor runtime (runsc).
		Name: "docker-sandbox", OS: "linux",
		Isolation:    protocol.IsolationSandbox,
		Kinds:        []protocol.Kind{protocol.KindContainer, protocol.KindNotebook, protocol.KindEndpoint},
		Accelerators: []string{AcceleratorNone},
		// runsc is registered with a Docker Engine of the machine's own;
		// Docker Desktop's VM and Podman are not where it was tried.
		Engines: map[string][]protocol.Kind{
			protocol.EngineDocker: {protocol.KindContainer, protocol.KindNotebook, protocol.KindEndpoint},
		},
	},
	{
		// Virtualization.framework. macOS runs at most two macOS guests
		// per Mac; Linux guests are not limited, so the cap counts and
		// caps macOS guests only.
		Name: "vz", OS: "darwin", Arch: "arm64",
		Isolation:       protocol.IsolationVM,
		Kinds:           []protocol.Kind{protocol.KindVM},
		Accelerators:    []string{AcceleratorNone},
		PerMachineLimit: 2,
		Limited:         MacOSGuestImage,
	},
	{
		// Processes on the Mac itself: the one driver that can use the
		// Apple GPU (Metal, MLX).
		Name: "macos-native", OS: "darwin",
		Isolation: protocol.IsolationProcess, Weak: true,
		Kinds:        []protocol.Kind{protocol.KindNotebook, protocol.KindEndpoint},
		Accelerators: []string{AcceleratorNone, AcceleratorAppleGPU},
	},
	{
		Name:         "sim",
		Isolation:    protocol.IsolationVM,
		Kinds:        []protocol.Kind{protocol.KindContainer, protocol.KindVM, protocol.KindNotebook, protocol.KindEndpoint},
		Accelerators: []string{AcceleratorNone, AcceleratorAppleGPU, AcceleratorNvidiaGPU, AcceleratorAMDGPU},
	},
}

// DriverTable indexes ds by name. Names should be distinct; the first row
// with a name wins.
func DriverTable(ds []Driver) map[string]Driver {
	t := make(map[string]Driver, len(ds))
	for _, d := range ds {
		if _, dup := t[d.Name]; !dup {
			t[d.Name] = d
		}
	}
	return t
}

// LookupDriver returns the row of DefaultDrivers named name.
func LookupDriver(name string) (Driver, bool) {
	for _, d := range DefaultDrivers {
		if d.Name == name {
			return d, true
		}
	}
	return Driver{}, false
}

// DriverOS returns the OS a driver of DefaultDrivers runs on ("" for any),
// and false for a driver the hub does not know. The hub uses it to check
// that an agent offers drivers only of its own OS.
func DriverOS(name string) (string, bool) {
	d, ok := LookupDriver(name)
	return d.OS, ok
}

// Runs reports whether the driver runs workloads of kind k with the
// accelerator acc ("" reads as AcceleratorNone). A driver that drives NVIDIA
// GPUs drives their MIG devices of every size: they are requested the same
// way, by UUID.
func (d Driver) Runs(k protocol.Kind, acc string) bool {
	if acc == "" {
		acc = AcceleratorNone
	}
	if strings.HasPrefix(acc, migAcceleratorPrefix) {
		acc = AcceleratorNvidiaGPU
	}
	return slices.Contains(d.Kinds, k) && slices.Contains(d.Accelerators, acc)
}

// RunsOn reports whether the driver runs workloads of kind k on a machine
// whose Docker engine is engine ("" counts as Docker).
func (d Driver) RunsOn(engine string, k protocol.Kind) bool {
	if d.Engines == nil {
		return true
	}
	if engine == "" {
		engine = protocol.EngineDocker
	}
	return slices.Contains(d.Engines[engine], k)
}

// FitsPlatform reports whether the driver runs on a machine of GOOS os and
// GOARCH arch.
func (d Driver) FitsPlatform(os, arch string) bool {
	return (d.OS == "" || d.OS == os) && (d.Arch == "" || d.Arch == arch)
}

// Allows reports whether one more workload fits under the driver's
// per-machine limit on a machine already holding n with it.
func (d Driver) Allows(n int) bool {
	return d.PerMachineLimit <= 0 || n < d.PerMachineLimit
}

// Counts reports whether a workload of image counts toward, and is capped
// by, the driver's per-machine limit.
func (d Driver) Counts(image string) bool {
	return d.Limited == nil || d.Limited(image)
}

// HeldWith is how many of the machine's holdings with d count toward d's
// per-machine limit.
func (m Machine) HeldWith(d Driver) int {
	n := 0
	for _, h := range m.Holding {
		if h.Driver == d.Name && d.Counts(h.Image) {
			n++
		}
	}
	return n
}

// MacOSGuestImage reports whether a vz image string is a macOS guest: an
// IPSW (".ipsw"), or guest=macos in its options (drivers/vz.ParseImage
// reads it the same way).
func MacOSGuestImage(image string) bool {
	src, frag, _ := strings.Cut(image, "#")
	guest := ""
	for opt := range strings.SplitSeq(frag, "&") {
		if v, ok := strings.CutPrefix(opt, "guest="); ok {
			guest = v
		}
	}
	if guest != "" {
		return guest == "macos"
	}
	if strings.HasPrefix(src, "https://") {
		src, _, _ = strings.Cut(src, "?")
	}
	return strings.HasSuffix(strings.ToLower(src), ".ipsw")
}
