// Package trust holds the hub's checks on what agents report. An agent's
// machine is not trusted: what it says is checked against its registration
// and bounded before the hub keeps it.
package trust

import (
	"fmt"

	"einsora.dev/edge/protocol"
)

// Bounds on a reported inventory. They are far above any real machine, so
// that breaking one means a bug or a lie, not a big machine.
const (
	MaxCPUs = 1024
	// MaxMemoryMB is 64 TiB.
	MaxMemoryMB = 64 << 20
	MaxGPUs     = 64
	// MaxGPUMemoryMB is 4 TiB for one GPU.
	MaxGPUMemoryMB = 4 << 20
	MaxGPUCores    = 1 << 20
	MaxNotes       = 32
	MaxDrivers     = 32
	MaxFeatures    = 16
	MaxRuntimes    = 32
	// MaxString bounds every string in an inventory, in bytes.
	MaxString = 256
)

// RuleError says which rule an inventory broke. Rule is a short stable
// name ("os-registered", "apple-gpu", ...) for logs and metrics.
type RuleError struct {
	Rule   string
	Detail string
}

func (e *RuleError) Error() string {
	return "check inventory: " + e.Rule + ": " + e.Detail
}

func broke(rule, format string, args ...any) error {
	return &RuleError{Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

var (
	knownOS    = map[string]bool{"linux": true, "darwin": true}
	knownArch  = map[string]bool{"amd64": true, "arm64": true}
	gpuVendors = map[string]bool{"apple": true, "nvidia": true, "amd": true, "intel": true}
	// dockerKinds are the engines an agent may report; "" from an agent
	// that does not say.
	dockerKinds = map[string]bool{"": true, protocol.EngineDocker: true, protocol.EngineDockerDesktop: true, protocol.EnginePodman: true}
)

// CheckInventory reports why inv does not fit the machine registered as
// regOS/regArch ("" = not yet known: the first inventory fixes them).
// driverOS tells the OS a driver runs on ("" for one that runs on any, such
// as a simulator) and whether the driver is known at all.
//
// It checks what arrives, before Sanitize: a string over MaxString is
// refused, not cut, since no honest agent sends one.
func CheckInventory(regOS, regArch string, inv *protocol.Inventory, driverOS func(driver string) (os string, known bool)) error {
	if inv == nil {
		return broke("missing", "no inventory")
	}
	if err := checkStrings(inv); err != nil {
		return err
	}
	if !knownOS[inv.OS] {
		return broke("os", "%q is not linux or darwin", inv.OS)
	}
	if regOS != "" && inv.OS != regOS {
		return broke("os-registered", "reports %s, registered as %s", inv.OS, regOS)
	}
	if !knownArch[inv.Arch] {
		return broke("arch", "%q is not amd64 or arm64", inv.Arch)
	}
	if regArch != "" && inv.Arch != regArch {
		return broke("arch-registered", "reports %s, registered as %s", inv.Arch, regArch)
	}

	if inv.CPUs < 1 || inv.CPUs > MaxCPUs {
		return broke("cpus", "%d not in 1..%d", inv.CPUs, MaxCPUs)
	}
	if inv.PerformanceCores < 0 || inv.EfficiencyCores < 0 || inv.PerformanceCores+inv.EfficiencyCores > MaxCPUs {
		return broke("cores", "performance %d, efficiency %d not in 0..%d", inv.PerformanceCores, inv.EfficiencyCores, MaxCPUs)
	}
	if inv.MemoryMB < 1 || inv.MemoryMB > MaxMemoryMB {
		return broke("memory", "%d MB not in 1..%d", inv.MemoryMB, MaxMemoryMB)
	}
	if inv.AppleSilicon && inv.OS != "darwin" {
		return broke("apple-silicon", "reported from %s", inv.OS)
	}
	if err := checkGPUs(inv); err != nil {
		return err
	}
	if inv.Docker != nil && len(inv.Docker.Runtimes) > MaxRuntimes {
		return broke("docker-runtimes", "%d over %d", len(inv.Docker.Runtimes), MaxRuntimes)
	}
	if inv.Docker != nil && !dockerKinds[inv.Docker.Kind] {
		return broke("docker-kind", "%q is not docker, docker-desktop or podman", inv.Docker.Kind)
	}
	if len(inv.Notes) > MaxNotes {
		return broke("notes", "%d over %d", len(inv.Notes), MaxNotes)
	}
	if len(inv.Features) > MaxFeatures {
		return broke("features", "%d over %d", len(inv.Features), MaxFeatures)
	}
	return checkDrivers(inv, driverOS)
}

func checkGPUs(inv *protocol.Inventory) error {
	if len(inv.GPUs) > MaxGPUs {
		return broke("gpus", "%d over %d", len(inv.GPUs), MaxGPUs)
	}
	apple := 0
	seen := make(map[string]bool, len(inv.GPUs))
	for i, g := range inv.GPUs {
		if !gpuVendors[g.Vendor] {
			return broke("gpu-vendor", "GPU %d: %q is not apple, nvidia, amd or intel", i, g.Vendor)
		}
		if g.ID == "" {
			return broke("gpu-id", "GPU %d: no id", i)
		}
		key := g.Vendor + "\x00" + g.ID
		if seen[key] {
			return broke("gpu-id", "GPU %d: %s %q listed twice", i, g.Vendor, g.ID)
		}
		seen[key] = true
		if g.MemoryMB < 0 || g.MemoryMB > MaxGPUMemoryMB {
			return broke("gpu-memory", "GPU %d: %d MB not in 0..%d", i, g.MemoryMB, MaxGPUMemoryMB)
		}
		if g.Cores < 0 || g.Cores > MaxGPUCores {
			return broke("gpu-cores", "GPU %d: %d not in 0..%d", i, g.Cores, MaxGPUCores)
		}
		if g.Vendor != "apple" {
			continue
		}
		// An Apple GPU is part of an Apple chip: there is one, and only a
		// native agent on macOS sees it.
		apple++
		if inv.OS != "darwin" || inv.Arch != "arm64" || !inv.AppleSilicon {
			return broke("apple-gpu", "reported from %s/%s with apple_silicon %v, want darwin/arm64 with apple_silicon", inv.OS, inv.Arch, inv.AppleSilicon)
		}
		if apple > 1 {
			return broke("apple-gpu", "%d Apple GPUs, want at most 1", apple)
		}
	}
	return checkMIG(inv.GPUs)
}

func checkDrivers(inv *protocol.Inventory, driverOS func(string) (string, bool)) error {
	if len(inv.Drivers) > MaxDrivers {
		return broke("drivers", "%d over %d", len(inv.Drivers), MaxDrivers)
	}
	seen := make(map[string]bool, len(inv.Drivers))
	for _, d := range inv.Drivers {
		if seen[d] {
			return broke("driver-duplicate", "%q listed twice", d)
		}
		seen[d] = true
		var os string
		known := false
		if driverOS != nil {
			os, known = driverOS(d)
		}
		if !known {
			return broke("driver-unknown", "%q", d)
		}
		if os != "" && os != inv.OS {
			return broke("driver-os", "%q runs on %s, reported from %s", d, os, inv.OS)
		}
	}
	// Withdrawing capacity only takes it away, but it must name drivers
	// the machine offers, each once.
	withdrawn := make(map[string]bool, len(inv.Withdrawn))
	for _, d := range inv.Withdrawn {
		if !seen[d] || withdrawn[d] {
			return broke("withdrawn", "%q is not an offered driver, or is listed twice", d)
		}
		withdrawn[d] = true
	}
	return nil
}

// checkStrings refuses any string over MaxString bytes.
func checkStrings(inv *protocol.Inventory) error {
	var err error
	eachString(inv, func(field string, s *string) {
		if err == nil && len(*s) > MaxString {
			err = broke("string-length", "%s: %d bytes over %d", field, len(*s), MaxString)
		}
	})
	return err
}

// eachString calls f with every string in inv and the field it is in.
func eachString(inv *protocol.Inventory, f func(field string, s *string)) {
	f("os", &inv.OS)
	f("arch", &inv.Arch)
	f("hostname", &inv.Hostname)
	f("os_version", &inv.OSVersion)
	f("kernel", &inv.Kernel)
	f("cpu_model", &inv.CPUModel)
	for i := range inv.GPUs {
		f("gpus.vendor", &inv.GPUs[i].Vendor)
		f("gpus.model", &inv.GPUs[i].Model)
		f("gpus.id", &inv.GPUs[i].ID)
		f("gpus.mig_mode", &inv.GPUs[i].MIGMode)
		f("gpus.parent", &inv.GPUs[i].Parent)
		f("gpus.profile", &inv.GPUs[i].Profile)
	}
	if inv.Docker != nil {
		f("docker.version", &inv.Docker.Version)
		f("docker.kind", &inv.Docker.Kind)
		f("docker.platform", &inv.Docker.Platform)
		for i := range inv.Docker.Runtimes {
			f("docker.runtimes", &inv.Docker.Runtimes[i])
		}
	}
	for i := range inv.Drivers {
		f("drivers", &inv.Drivers[i])
	}
	for i := range inv.Features {
		f("features", &inv.Features[i])
	}
	for i := range inv.Notes {
		f("notes", &inv.Notes[i])
	}
}

// Sanitize bounds inv in place so that it is safe to keep and log whatever
// it held: lists are cut to their bounds, counts clamped, and every string
// loses control characters and invalid UTF-8 and is cut to MaxString bytes.
// Reported text is bounded and never shown to users; Sanitize does not make
// it true, only harmless.
func Sanitize(inv *protocol.Inventory) {
	if inv == nil {
		return
	}
	inv.GPUs = cut(inv.GPUs, MaxGPUs)
	inv.Notes = cut(inv.Notes, MaxNotes)
	inv.Drivers = cut(inv.Drivers, MaxDrivers)
	inv.Features = cut(inv.Features, MaxFeatures)
	if inv.Docker != nil {
		inv.Docker.Runtimes = cut(inv.Docker.Runtimes, MaxRuntimes)
	}
	inv.CPUs = clamp(inv.CPUs, MaxCPUs)
	inv.PerformanceCores = clamp(inv.PerformanceCores, MaxCPUs)
	inv.EfficiencyCores = clamp(inv.EfficiencyCores, MaxCPUs)
	inv.MemoryMB = clamp(inv.MemoryMB, MaxMemoryMB)
	for i := range inv.GPUs {
		inv.GPUs[i].MemoryMB = clamp(inv.GPUs[i].MemoryMB, MaxGPUMemoryMB)
		inv.GPUs[i].Cores = clamp(inv.GPUs[i].Cores, MaxGPUCores)
	}
	eachString(inv, func(_ string, s *string) { *s = Text(*s, MaxString) })
}

func cut[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n:n]
	}
	return s
}

func clamp(v, hi int) int { return min(max(v, 0), hi) }
