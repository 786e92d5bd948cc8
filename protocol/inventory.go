package protocol

// Inventory is what an agent reports about its machine. The hub validates it
// against the machine's registration and never lets it decide policy.
type Inventory struct {
	OS       string `json:"os"`   // GOOS: linux, darwin
	Arch     string `json:"arch"` // GOARCH: amd64, arm64
	Hostname string `json:"hostname,omitempty"`
	// OSVersion is e.g. "Debian 12" or "macOS 15.1"; Kernel the kernel release.
	OSVersion string `json:"os_version,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
	CPUModel  string `json:"cpu_model,omitempty"`
	// CPUs is the number of CPUs the agent may schedule on (a cgroup limit
	// when there is one). PerformanceCores and EfficiencyCores are set on
	// Apple Silicon.
	CPUs             int `json:"cpus"`
	PerformanceCores int `json:"performance_cores,omitempty"`
	EfficiencyCores  int `json:"efficiency_cores,omitempty"`
	MemoryMB         int `json:"memory_mb"`
	// AppleSilicon is set on a Mac with an Apple chip.
	AppleSilicon bool `json:"apple_silicon,omitempty"`
	// Virtualization: /dev/kvm on Linux, kern.hv_support on macOS.
	Virtualization bool    `json:"virtualization,omitempty"`
	GPUs           []GPU   `json:"gpus,omitempty"`
	Docker         *Docker `json:"docker,omitempty"`
	// Drivers lists the drivers the agent offers now.
	Drivers []string `json:"drivers"`
	// Withdrawn lists offered drivers whose per-machine limited capacity
	// the machine withdrew for now, with a note saying why: vz, when macOS
	// refused a guest below its limit of two (its counter is known to
	// stick). The hub places no more limited workloads with them.
	Withdrawn []string `json:"withdrawn,omitempty"`
	// Features lists what this agent understands beyond protocol Version
	// (AgentFeatures); a hub places work needing a feature only on
	// machines whose agent reports it.
	Features []string `json:"features,omitempty"`
	// Notes say what could not be probed; a partial inventory is reported
	// rather than none.
	Notes []string `json:"notes,omitempty"`
}

// GPU is one accelerator.
type GPU struct {
	// Vendor is "apple", "nvidia", "amd" or "intel".
	Vendor   string `json:"vendor"`
	Model    string `json:"model,omitempty"`
	ID       string `json:"id"` // a UUID or a stable index such as "0"
	MemoryMB int    `json:"memory_mb,omitempty"`
	Cores    int    `json:"cores,omitempty"`
	// MIGMode is set on an NVIDIA GPU that can be split into MIG devices:
	// "enabled", "disabled", or "pending" while a change of mode waits for
	// a GPU reset. A GPU whose mode is enabled or pending is never reserved
	// whole: its MIG devices are, when enabled.
	MIGMode string `json:"mig_mode,omitempty"`
	// Parent is set on a MIG device: the ID of the GPU it is part of. A MIG
	// device's ID is its "MIG-..." UUID, which is how it is requested.
	Parent string `json:"parent,omitempty"`
	// Profile is a MIG device's profile, e.g. "1g.10gb".
	Profile string `json:"profile,omitempty"`
}

// MIG modes of GPU.MIGMode.
const (
	MIGEnabled  = "enabled"
	MIGDisabled = "disabled"
	MIGPending  = "pending"
)

// Docker describes a Docker Engine the agent can reach.
type Docker struct {
	// Version is the engine's version as it reports it: "27.3.1", or for
	// a development build "master". It is text, never compared as a
	// number; Podman's is Podman's own ("5.4.1").
	Version string `json:"version"`
	// Kind is which engine answers the Docker API: EngineDocker,
	// EngineDockerDesktop or EnginePodman; "" from an agent that does not
	// say. The hub's driver table decides what each may run.
	Kind string `json:"kind,omitempty"`
	// Platform is the engine's own name for itself, e.g. "Docker Desktop
	// 4.38.0 (181591)" or "linux/amd64/fedora-41".
	Platform string   `json:"platform,omitempty"`
	Runtimes []string `json:"runtimes,omitempty"`
}

// Engine kinds of Docker.Kind.
const (
	EngineDocker        = "docker"
	EngineDockerDesktop = "docker-desktop"
	EnginePodman        = "podman"
)

// Agent features.
const (
	// FeatureSpec: the agent runs DesiredWorkload's WorkloadSpec. An
	// older agent would ignore the fields and run the bare image.
	FeatureSpec = "spec"
)

// AgentFeatures are the features this agent reports.
var AgentFeatures = []string{FeatureSpec}
