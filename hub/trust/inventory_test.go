package trust

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"einsora.dev/edge/protocol"
)

// driverTable stands in for the hub's driver table.
func driverTable(name string) (string, bool) {
	switch name {
	case "docker":
		return "linux", true
	case "vz", "macosnative":
		return "darwin", true
	case "sim":
		return "", true
	}
	return "", false
}

func linuxGPUBox() *protocol.Inventory {
	return &protocol.Inventory{
		OS: "linux", Arch: "amd64", Hostname: "gpu-node-07", OSVersion: "Ubuntu 24.04.1 LTS",
		Kernel: "6.8.0-49-generic", CPUModel: "Intel(R) Xeon(R) Platinum 8480+",
		CPUs: 224, MemoryMB: 2063879, Virtualization: true,
		GPUs: []protocol.GPU{
			{Vendor: "nvidia", Model: "NVIDIA H100 80GB HBM3", ID: "GPU-36f675cc-81e7-4ef5-a8e2-5d940ed90475", MemoryMB: 81559},
			{Vendor: "nvidia", Model: "NVIDIA H100 80GB HBM3", ID: "GPU-6513270e-269e-4d37-b2a7-4de452e6b438", MemoryMB: 81559},
		},
		Docker:  &protocol.Docker{Version: "27.3.1", Runtimes: []string{"nvidia", "runc"}},
		Drivers: []string{"docker", "sim"},
	}
}

func appleMac() *protocol.Inventory {
	return &protocol.Inventory{
		OS: "darwin", Arch: "arm64", Hostname: "studio.local", OSVersion: "macOS 15.1.1", Kernel: "24.1.0",
		CPUModel: "Apple M3 Max", CPUs: 16, PerformanceCores: 12, EfficiencyCores: 4, MemoryMB: 131072,
		AppleSilicon: true, Virtualization: true,
		GPUs:    []protocol.GPU{{Vendor: "apple", Model: "Apple M3 Max", ID: "0", Cores: 40}},
		Drivers: []string{"vz", "macosnative"},
	}
}

func TestCheckInventory(t *testing.T) {
	megabyte := strings.Repeat("x", 1<<20)
	tests := []struct {
		name     string
		regOS    string
		regArch  string
		inv      func() *protocol.Inventory
		wantRule string // "" for none
	}{
		{"linux_gpu_box_registered", "linux", "amd64", linuxGPUBox, ""},
		{"linux_first_inventory", "", "", linuxGPUBox, ""},
		{"apple_mac_registered", "darwin", "arm64", appleMac, ""},
		{"apple_mac_first_inventory", "", "", appleMac, ""},
		{"apple_mac_vz_withdrawn", "darwin", "arm64", func() *protocol.Inventory {
			i := appleMac()
			i.Drivers = []string{"vz"}
			i.Withdrawn = []string{"vz"}
			return i
		}, ""},
		{"nil_inventory", "", "", func() *protocol.Inventory { return nil }, "missing"},

		{"darwin_from_linux_registered_machine", "linux", "arm64", appleMac, "os-registered"},
		{"linux_from_darwin_registered_machine", "darwin", "amd64", linuxGPUBox, "os-registered"},
		{"arch_changed", "linux", "arm64", linuxGPUBox, "arch-registered"},
		{"windows", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.OS = "windows"; return i }, "os"},
		{"empty_os", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.OS = ""; return i }, "os"},
		{"riscv", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.Arch = "riscv64"; return i }, "arch"},

		{"two_apple_gpus", "darwin", "arm64", func() *protocol.Inventory {
			i := appleMac()
			i.GPUs = append(i.GPUs, protocol.GPU{Vendor: "apple", Model: "Apple M3 Max", ID: "1", Cores: 40})
			return i
		}, "apple-gpu"},
		{"apple_gpu_on_linux", "linux", "amd64", func() *protocol.Inventory {
			i := linuxGPUBox()
			i.GPUs = append(i.GPUs, protocol.GPU{Vendor: "apple", Model: "Apple M2", ID: "0", Cores: 10})
			return i
		}, "apple-gpu"},
		{"apple_silicon_on_linux", "linux", "amd64", func() *protocol.Inventory { i := linuxGPUBox(); i.AppleSilicon = true; return i }, "apple-silicon"},
		{"apple_gpu_under_rosetta", "", "", func() *protocol.Inventory { i := appleMac(); i.Arch = "amd64"; return i }, "apple-gpu"},
		{"apple_gpu_without_apple_silicon", "", "", func() *protocol.Inventory { i := appleMac(); i.AppleSilicon = false; return i }, "apple-gpu"},
		{"unknown_gpu_vendor", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.GPUs[0].Vendor = "3dfx"; return i }, "gpu-vendor"},
		{"gpu_without_id", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.GPUs[0].ID = ""; return i }, "gpu-id"},
		{"same_gpu_twice", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.GPUs[1].ID = i.GPUs[0].ID; return i }, "gpu-id"},

		{"driver_from_wrong_os", "linux", "amd64", func() *protocol.Inventory { i := linuxGPUBox(); i.Drivers = append(i.Drivers, "vz"); return i }, "driver-os"},
		{"docker_driver_on_mac", "darwin", "arm64", func() *protocol.Inventory { i := appleMac(); i.Drivers = []string{"docker"}; return i }, "driver-os"},
		{"withdrawn_not_offered", "darwin", "arm64", func() *protocol.Inventory { i := appleMac(); i.Withdrawn = []string{"vz"}; i.Drivers = nil; return i }, "withdrawn"},
		{"withdrawn_twice", "darwin", "arm64", func() *protocol.Inventory {
			i := appleMac()
			i.Drivers = []string{"vz"}
			i.Withdrawn = []string{"vz", "vz"}
			return i
		}, "withdrawn"},
		{"unknown_driver", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.Drivers = []string{"firecracker"}; return i }, "driver-unknown"},
		{"driver_twice", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.Drivers = []string{"docker", "docker"}; return i }, "driver-duplicate"},

		{"zero_cpus", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.CPUs = 0; return i }, "cpus"},
		{"million_cpus", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.CPUs = 1_000_000; return i }, "cpus"},
		{"negative_cores", "", "", func() *protocol.Inventory { i := appleMac(); i.EfficiencyCores = -4; return i }, "cores"},
		{"zero_memory", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.MemoryMB = 0; return i }, "memory"},
		{"memory_over_64_tib", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.MemoryMB = MaxMemoryMB + 1; return i }, "memory"},
		{"memory_exactly_64_tib", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.MemoryMB = MaxMemoryMB; return i }, ""},
		{"65_gpus", "", "", func() *protocol.Inventory {
			i := linuxGPUBox()
			i.GPUs = nil
			for n := range MaxGPUs + 1 {
				i.GPUs = append(i.GPUs, protocol.GPU{Vendor: "nvidia", ID: fmt.Sprint(n)})
			}
			return i
		}, "gpus"},
		{"negative_gpu_memory", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.GPUs[0].MemoryMB = -1; return i }, "gpu-memory"},
		{"absurd_gpu_cores", "", "", func() *protocol.Inventory { i := appleMac(); i.GPUs[0].Cores = 1 << 30; return i }, "gpu-cores"},
		{"33_notes", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.Notes = make([]string, MaxNotes+1); return i }, "notes"},
		{"17_features", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.Features = make([]string, MaxFeatures+1); return i }, "features"},
		{"33_drivers", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.Drivers = make([]string, MaxDrivers+1); return i }, "drivers"},
		{"33_runtimes", "", "", func() *protocol.Inventory {
			i := linuxGPUBox()
			i.Docker.Runtimes = make([]string, MaxRuntimes+1)
			return i
		}, "docker-runtimes"},

		{"megabyte_hostname", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.Hostname = megabyte; return i }, "string-length"},
		{"megabyte_gpu_model", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.GPUs[1].Model = megabyte; return i }, "string-length"},
		{"megabyte_note", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.Notes = []string{megabyte}; return i }, "string-length"},
		{"megabyte_driver", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.Drivers = []string{megabyte}; return i }, "string-length"},
		{"megabyte_docker_runtime", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.Docker.Runtimes = []string{megabyte}; return i }, "string-length"},
		{"podman", "", "", func() *protocol.Inventory {
			i := linuxGPUBox()
			i.Docker = &protocol.Docker{Version: "5.4.1", Kind: protocol.EnginePodman, Platform: "linux/amd64/fedora-41"}
			return i
		}, ""},
		{"docker_desktop_master", "", "", func() *protocol.Inventory {
			i := linuxGPUBox()
			i.Docker = &protocol.Docker{Version: "master", Kind: protocol.EngineDockerDesktop}
			return i
		}, ""},
		{"unknown_engine_kind", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.Docker.Kind = "containerd"; return i }, "docker-kind"},
		{"string_at_limit", "", "", func() *protocol.Inventory { i := linuxGPUBox(); i.CPUModel = megabyte[:MaxString]; return i }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckInventory(tt.regOS, tt.regArch, tt.inv(), driverTable)
			if tt.wantRule == "" {
				if err != nil {
					t.Errorf("got %v, want no error", err)
				}
				return
			}
			var re *RuleError
			if !errors.As(err, &re) {
				t.Fatalf("got %v, want a RuleError for %s", err, tt.wantRule)
			}
			if re.Rule != tt.wantRule {
				t.Errorf("got rule %s (%v), want %s", re.Rule, err, tt.wantRule)
			}
			if !strings.HasPrefix(err.Error(), "check inventory: "+tt.wantRule+": ") {
				t.Errorf("got message %q, want it to name the rule", err)
			}
			if len(err.Error()) > 512 {
				t.Errorf("got a %d-byte message, want it bounded", len(err.Error()))
			}
		})
	}
}

func TestCheckInventoryWithoutDriverTable(t *testing.T) {
	err := CheckInventory("linux", "amd64", linuxGPUBox(), nil)
	var re *RuleError
	if !errors.As(err, &re) || re.Rule != "driver-unknown" {
		t.Errorf("got %v, want driver-unknown", err)
	}
}

func TestSanitize(t *testing.T) {
	tests := []struct {
		name  string
		inv   func() *protocol.Inventory
		check func(t *testing.T, inv *protocol.Inventory)
	}{
		{"control_chars_dropped", func() *protocol.Inventory {
			i := linuxGPUBox()
			i.Hostname = "evil\x1b[31mhost\r\n"
			i.Notes = []string{"bell\a and nul\x00"}
			return i
		}, func(t *testing.T, inv *protocol.Inventory) {
			if inv.Hostname != "evil[31mhost" {
				t.Errorf("got hostname %q, want %q", inv.Hostname, "evil[31mhost")
			}
			if inv.Notes[0] != "bell and nul" {
				t.Errorf("got note %q, want %q", inv.Notes[0], "bell and nul")
			}
		}},
		{"invalid_utf8_dropped", func() *protocol.Inventory { i := linuxGPUBox(); i.CPUModel = "Xeon\xff\xfe"; return i },
			func(t *testing.T, inv *protocol.Inventory) {
				if inv.CPUModel != "Xeon" {
					t.Errorf("got %q, want %q", inv.CPUModel, "Xeon")
				}
			}},
		{"long_string_cut_on_rune_boundary", func() *protocol.Inventory {
			i := linuxGPUBox()
			i.OSVersion = "a" + strings.Repeat("é", 1<<19) // 2-byte runes, odd offset
			return i
		}, func(t *testing.T, inv *protocol.Inventory) {
			if len(inv.OSVersion) > MaxString || !utf8.ValidString(inv.OSVersion) {
				t.Errorf("got %d bytes, valid %v; want at most %d valid", len(inv.OSVersion), utf8.ValidString(inv.OSVersion), MaxString)
			}
			if len(inv.OSVersion) < MaxString-1 {
				t.Errorf("got %d bytes, want %d or %d", len(inv.OSVersion), MaxString-1, MaxString)
			}
		}},
		{"lists_cut", func() *protocol.Inventory {
			i := linuxGPUBox()
			i.Notes = make([]string, 1000)
			i.GPUs = make([]protocol.GPU, 1000)
			i.Drivers = make([]string, 1000)
			i.Docker.Runtimes = make([]string, 1000)
			i.Features = make([]string, 1000)
			return i
		}, func(t *testing.T, inv *protocol.Inventory) {
			if len(inv.Features) != MaxFeatures {
				t.Errorf("got %d features, want %d", len(inv.Features), MaxFeatures)
			}
			if len(inv.Notes) != MaxNotes || len(inv.GPUs) != MaxGPUs || len(inv.Drivers) != MaxDrivers || len(inv.Docker.Runtimes) != MaxRuntimes {
				t.Errorf("got notes %d, gpus %d, drivers %d, runtimes %d; want %d, %d, %d, %d",
					len(inv.Notes), len(inv.GPUs), len(inv.Drivers), len(inv.Docker.Runtimes), MaxNotes, MaxGPUs, MaxDrivers, MaxRuntimes)
			}
		}},
		{"counts_clamped", func() *protocol.Inventory {
			i := appleMac()
			i.CPUs, i.MemoryMB, i.EfficiencyCores = -5, 1<<40, -1
			i.GPUs[0].Cores, i.GPUs[0].MemoryMB = 1<<40, -3
			return i
		}, func(t *testing.T, inv *protocol.Inventory) {
			if inv.CPUs != 0 || inv.MemoryMB != MaxMemoryMB || inv.EfficiencyCores != 0 || inv.GPUs[0].Cores != MaxGPUCores || inv.GPUs[0].MemoryMB != 0 {
				t.Errorf("got cpus %d, memory %d, efficiency %d, gpu cores %d, gpu memory %d; want 0, %d, 0, %d, 0",
					inv.CPUs, inv.MemoryMB, inv.EfficiencyCores, inv.GPUs[0].Cores, inv.GPUs[0].MemoryMB, MaxMemoryMB, MaxGPUCores)
			}
		}},
		{"clean_inventory_unchanged", linuxGPUBox, func(t *testing.T, inv *protocol.Inventory) {
			want, _ := json.Marshal(linuxGPUBox())
			got, _ := json.Marshal(inv)
			if string(got) != string(want) {
				t.Errorf("got %s, want %s", got, want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := tt.inv()
			Sanitize(inv)
			tt.check(t, inv)
		})
	}
	Sanitize(nil) // must not panic
}

// FuzzCheckInventory decodes arbitrary bytes as an inventory and checks and
// sanitizes it: neither may panic, and what Sanitize leaves is bounded.
func FuzzCheckInventory(f *testing.F) {
	for _, inv := range []*protocol.Inventory{linuxGPUBox(), appleMac()} {
		data, _ := json.Marshal(inv)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var inv protocol.Inventory
		if err := json.Unmarshal(data, &inv); err != nil {
			return
		}
		for _, reg := range [][2]string{{"", ""}, {"linux", "amd64"}, {"darwin", "arm64"}} {
			if err := CheckInventory(reg[0], reg[1], &inv, driverTable); err != nil {
				var re *RuleError
				if !errors.As(err, &re) || re.Rule == "" {
					t.Fatalf("got %v, want a RuleError naming its rule", err)
				}
			}
		}
		Sanitize(&inv)
		once, _ := json.Marshal(inv)
		eachString(&inv, func(field string, s *string) {
			if len(*s) > MaxString || !utf8.ValidString(*s) || strings.ContainsFunc(*s, unicode.IsControl) {
				t.Fatalf("after Sanitize, %s is %q: want valid UTF-8 without control characters, at most %d bytes", field, *s, MaxString)
			}
		})
		if len(inv.GPUs) > MaxGPUs || len(inv.Notes) > MaxNotes || len(inv.Drivers) > MaxDrivers {
			t.Fatalf("after Sanitize: %d GPUs, %d notes, %d drivers", len(inv.GPUs), len(inv.Notes), len(inv.Drivers))
		}
		if err := CheckInventory("", "", &inv, driverTable); err != nil {
			var re *RuleError
			if errors.As(err, &re) && re.Rule == "string-length" {
				t.Fatalf("after Sanitize: got %v", err)
			}
		}
		Sanitize(&inv)
		if twice, _ := json.Marshal(inv); string(twice) != string(once) {
			t.Fatalf("Sanitize not idempotent: %s then %s", once, twice)
		}
	})
}
