package placement

import (
	"fmt"
	"testing"

	"einsora.dev/edge/protocol"
)

// mac is an online Apple Silicon Mac with its GPU, vz and macos-native.
func mac(id, owner, region string) Machine {
	return Machine{
		ID: id, Owner: owner, Region: region, OS: "darwin", Arch: "arm64", Online: true,
		CPUs: 10, MemoryMB: 32768,
		Devices: map[string][]string{AcceleratorAppleGPU: {"apple-gpu:0"}},
		Drivers: []string{"vz", "macos-native"},
	}
}

// linux is an online Linux box with n NVIDIA GPUs, docker and docker-sandbox.
func linux(id, owner, region string, n int) Machine {
	m := Machine{
		ID: id, Owner: owner, Region: region, OS: "linux", Arch: "amd64", Online: true,
		CPUs: 16, MemoryMB: 65536,
		Drivers: []string{"docker", "docker-sandbox"},
	}
	for i := range n {
		if m.Devices == nil {
			m.Devices = map[string][]string{}
		}
		m.Devices[AcceleratorNvidiaGPU] = append(m.Devices[AcceleratorNvidiaGPU], fmt.Sprintf("nvidia:GPU-%d", i))
	}
	return m
}

func wl(id, tenant, region string, k protocol.Kind, class string) Workload {
	return Workload{ID: id, Tenant: tenant, Region: region, Kind: k, Class: class}
}

func class(t testing.TB, name string) Class {
	t.Helper()
	for _, c := range DefaultClasses {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no class %s", name)
	return Class{}
}

// with returns m changed by fs, for table rows.
func with(m Machine, fs ...func(*Machine)) Machine {
	for _, f := range fs {
		f(&m)
	}
	return m
}

func offline(m *Machine) { m.Online = false }

func holding(hs ...Held) func(*Machine) {
	return func(m *Machine) { m.Holding = append(m.Holding, hs...) }
}

func drivers(names ...string) func(*Machine) {
	return func(m *Machine) { m.Drivers = names }
}

func size(cpus, mem int) func(*Machine) {
	return func(m *Machine) { m.CPUs, m.MemoryMB = cpus, mem }
}
