package placement

import (
	"reflect"
	"testing"

	"einsora.dev/edge/protocol"
)

func TestDevicesFromInventory(t *testing.T) {
	tests := []struct {
		name string
		gpus []protocol.GPU
		want map[string][]string
	}{
		{"none", nil, nil},
		{"apple", []protocol.GPU{{Vendor: "apple", ID: "0"}}, map[string][]string{AcceleratorAppleGPU: {"apple-gpu:0"}}},
		{"nvidia_sorted", []protocol.GPU{{Vendor: "nvidia", ID: "GPU-b"}, {Vendor: "NVIDIA", ID: "GPU-a"}},
			map[string][]string{AcceleratorNvidiaGPU: {"nvidia:GPU-a", "nvidia:GPU-b"}}},
		{"amd", []protocol.GPU{{Vendor: "amd", ID: "1"}}, map[string][]string{AcceleratorAMDGPU: {"amd:1"}}},
		{"intel_left_out", []protocol.GPU{{Vendor: "intel", ID: "0"}}, nil},
		{"no_id_left_out", []protocol.GPU{{Vendor: "nvidia"}}, nil},
		{"repeated_id_once", []protocol.GPU{{Vendor: "nvidia", ID: "x"}, {Vendor: "nvidia", ID: "x"}},
			map[string][]string{AcceleratorNvidiaGPU: {"nvidia:x"}}},
		{"mixed", []protocol.GPU{{Vendor: "nvidia", ID: "u1"}, {Vendor: "amd", ID: "0"}, {Vendor: "intel", ID: "0"}},
			map[string][]string{AcceleratorNvidiaGPU: {"nvidia:u1"}, AcceleratorAMDGPU: {"amd:0"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DevicesFromInventory(protocol.Inventory{GPUs: tt.gpus})
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRule5_MachineCanHost(t *testing.T) {
	m := linux("m-1", "acme", "eu-west", 0)
	tests := []struct {
		name string
		m    Machine
		w    Workload
		want bool
	}{
		{"own_machine_same_region", m, wl("w", "acme", "eu-west", protocol.KindContainer, "cpu-1"), true},
		{"other_tenant", m, wl("w", "globex", "eu-west", protocol.KindContainer, "cpu-1"), false},
		{"other_region", m, wl("w", "acme", "us-east", protocol.KindContainer, "cpu-1"), false},
		{"no_owner_hosts_nothing", with(m, func(m *Machine) { m.Owner = "" }), wl("w", "", "eu-west", protocol.KindContainer, "cpu-1"), false},
		{"offline_still_can_host", with(m, offline), wl("w", "acme", "eu-west", protocol.KindContainer, "cpu-1"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.CanHost(tt.w); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRule5_MachinePermits(t *testing.T) {
	m := linux("m-1", "acme", "eu-west", 0)
	own := wl("w", "acme", "eu-west", protocol.KindContainer, "cpu-1")
	other := wl("w", "globex", "eu-west", protocol.KindContainer, "cpu-1")
	tests := []struct {
		name   string
		m      Machine
		w      Workload
		driver string
		want   bool
	}{
		{"weak_docker_owner", m, own, "docker", true},
		{"weak_docker_other_tenant", m, other, "docker", false},
		{"weak_native_other_tenant", m, other, "macos-native", false},
		{"sandbox_other_tenant", m, other, "docker-sandbox", true},
		{"vz_other_tenant", m, other, "vz", true},
		{"strong_owner", m, own, "vz", true},
		{"weak_no_owner", with(m, func(m *Machine) { m.Owner = "" }), wl("w", "", "eu-west", protocol.KindContainer, "cpu-1"), "docker", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.Permits(tt.w, mustDriver(t, tt.driver)); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMachineOffers(t *testing.T) {
	tests := []struct {
		name   string
		m      Machine
		driver string
		want   bool
	}{
		{"offered_and_fits", mac("m", "a", "r"), "vz", true},
		{"not_offered", with(mac("m", "a", "r"), drivers("macos-native")), "vz", false},
		{"offered_wrong_os", with(linux("m", "a", "r", 0), drivers("vz", "docker")), "vz", false},
		{"offered_wrong_arch", with(mac("m", "a", "r"), func(m *Machine) { m.Arch = "amd64" }), "vz", false},
		{"sim_on_linux", with(linux("m", "a", "r", 0), drivers("sim")), "sim", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.Offers(mustDriver(t, tt.driver)); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMachineEquipped(t *testing.T) {
	tests := []struct {
		name  string
		m     Machine
		class Class
		want  bool
	}{
		{"mac_apple_gpu", mac("m", "a", "r"), class(t, "apple-gpu"), true},
		{"mac_no_nvidia", mac("m", "a", "r"), class(t, "nvidia-1"), false},
		{"linux_no_gpu", linux("m", "a", "r", 0), class(t, "nvidia-1"), false},
		{"linux_one_gpu", linux("m", "a", "r", 1), class(t, "nvidia-1"), true},
		{"too_few_cpus", with(linux("m", "a", "r", 0), size(2, 65536)), class(t, "cpu-4"), false},
		{"too_little_memory", with(linux("m", "a", "r", 0), size(16, 4096)), class(t, "cpu-4"), false},
		{"exactly_enough", with(linux("m", "a", "r", 0), size(4, 8192)), class(t, "cpu-4"), true},
		{"two_gpus_of_one", linux("m", "a", "r", 1), Class{Name: "nvidia-2", Accelerator: AcceleratorNvidiaGPU, Devices: 2}, false},
		{"busy_still_equipped", with(linux("m", "a", "r", 1), holding(Held{CPUs: 16, MemoryMB: 65536, Devices: []string{"nvidia:GPU-0"}})), class(t, "nvidia-1"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.Equipped(tt.class); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMachineFree(t *testing.T) {
	tests := []struct {
		name string
		m    Machine
		want Free
	}{
		{"empty", linux("m", "a", "r", 2), Free{CPUs: 16, MemoryMB: 65536,
			Devices: map[string][]string{AcceleratorNvidiaGPU: {"nvidia:GPU-0", "nvidia:GPU-1"}}}},
		{"holding_subtracted", with(linux("m", "a", "r", 2), holding(
			Held{Workload: "w1", Driver: "docker", CPUs: 4, MemoryMB: 16384, Devices: []string{"nvidia:GPU-0"}},
			Held{Workload: "w2", Driver: "docker-sandbox", CPUs: 1, MemoryMB: 2048},
			Held{Workload: "w3", Driver: "docker", CPUs: 1, MemoryMB: 2048},
		)), Free{CPUs: 10, MemoryMB: 45056,
			Devices: map[string][]string{AcceleratorNvidiaGPU: {"nvidia:GPU-1"}},
			Drivers: map[string]int{"docker": 2, "docker-sandbox": 1}}},
		{"all_devices_held", with(mac("m", "a", "r"), holding(
			Held{Workload: "w1", Driver: "macos-native", CPUs: 4, MemoryMB: 16384, Devices: []string{"apple-gpu:0"}},
		)), Free{CPUs: 6, MemoryMB: 16384, Drivers: map[string]int{"macos-native": 1}}},
		{"unknown_held_device_frees_nothing", with(mac("m", "a", "r"), holding(
			Held{Workload: "w1", Driver: "macos-native", Devices: []string{"nvidia:x"}},
		)), Free{CPUs: 10, MemoryMB: 32768, Devices: map[string][]string{AcceleratorAppleGPU: {"apple-gpu:0"}},
			Drivers: map[string]int{"macos-native": 1}}},
		{"overcommitted_goes_negative", with(linux("m", "a", "r", 0), size(2, 2048), holding(
			Held{Workload: "w1", Driver: "docker", CPUs: 4, MemoryMB: 8192},
		)), Free{CPUs: -2, MemoryMB: -6144, Drivers: map[string]int{"docker": 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.Free(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRule5_ResourcesFree(t *testing.T) {
	gpu := map[string][]string{AcceleratorNvidiaGPU: {"nvidia:GPU-0"}}
	tests := []struct {
		name  string
		free  Free
		class string
		want  bool
	}{
		{"cpu_fits", Free{CPUs: 1, MemoryMB: 2048}, "cpu-1", true},
		{"one_cpu_short", Free{CPUs: 3, MemoryMB: 8192}, "cpu-4", false},
		{"memory_short", Free{CPUs: 4, MemoryMB: 8191}, "cpu-4", false},
		{"gpu_fits", Free{CPUs: 4, MemoryMB: 16384, Devices: gpu}, "nvidia-1", true},
		{"gpu_taken", Free{CPUs: 4, MemoryMB: 16384}, "nvidia-1", false},
		{"wrong_gpu", Free{CPUs: 4, MemoryMB: 16384, Devices: gpu}, "apple-gpu", false},
		{"negative", Free{CPUs: -1, MemoryMB: 100000}, "cpu-1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.free.Fits(class(t, tt.class)); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRule5_WorkloadSticky(t *testing.T) {
	tests := []struct {
		name    string
		kind    protocol.Kind
		machine string
		want    bool
	}{
		{"vm_that_ran", protocol.KindVM, "m-1", true},
		{"notebook_that_ran", protocol.KindNotebook, "m-1", true},
		{"vm_never_ran", protocol.KindVM, "", false},
		{"container_that_ran", protocol.KindContainer, "m-1", false},
		{"endpoint_that_ran", protocol.KindEndpoint, "m-1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := Workload{Kind: tt.kind, HeldMachine: tt.machine}
			if got := w.Sticky(); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
