package inventory

import (
	"context"
	"testing"
)

// appleSysctl is what the kernel of an Apple-chip Mac answers.
func appleSysctl(chip string, perf, eff uint64, memGiB uint64, version string) fakeSysctl {
	return fakeSysctl{
		strs: map[string]string{
			"machdep.cpu.brand_string": chip,
			"kern.osrelease":           "24.1.0",
			"kern.hostname":            "build-mac.local",
			"kern.osproductversion":    version,
		},
		ints: map[string]uint64{
			"hw.logicalcpu":             perf + eff,
			"hw.perflevel0.physicalcpu": perf,
			"hw.perflevel1.physicalcpu": eff,
			"hw.memsize":                memGiB << 30,
			"hw.optional.arm64":         1,
			"kern.hv_support":           1,
		},
	}
}

// TestProbeDarwin runs the macOS probers on fake sysctl values and command
// output, and compares the inventories with testdata/<name>.golden.
func TestProbeDarwin(t *testing.T) {
	intelMac := fakeSysctl{
		strs: map[string]string{
			"machdep.cpu.brand_string": "Intel(R) Core(TM) i9-9980HK CPU @ 2.40GHz",
			"kern.osrelease":           "23.6.0",
			"kern.hostname":            "old-mbp.local",
		},
		ints: map[string]uint64{"hw.logicalcpu": 16, "hw.memsize": 32 << 30, "kern.hv_support": 1},
	}
	tests := []struct {
		name string
		arch string
		sys  fakeSysctl
		cmds fakeCommands
	}{
		{"darwin-m1", "arm64", appleSysctl("Apple M1", 4, 4, 16, "14.7.1"), fakeCommands{
			"system_profiler SPDisplaysDataType -json": "system-profiler-displays-m1.json",
		}},
		{"darwin-m2-pro", "arm64", appleSysctl("Apple M2 Pro", 8, 4, 32, "15.1"), fakeCommands{
			"system_profiler SPDisplaysDataType -json": "system-profiler-displays-m2-pro.json",
		}},
		{"darwin-m3-max", "arm64", appleSysctl("Apple M3 Max", 12, 4, 128, "15.1.1"), fakeCommands{
			"system_profiler SPDisplaysDataType -json": "system-profiler-displays-m3-max.json",
		}},
		// system_profiler timing out leaves the GPU to ioreg.
		{"darwin-m4-ioreg-fallback", "arm64", appleSysctl("Apple M4", 4, 6, 16, "15.2"), fakeCommands{
			"system_profiler SPDisplaysDataType -json": "!system_profiler: timed out after 2s",
			"ioreg -rc AGXAccelerator":                 "ioreg-agx-m4.txt",
		}},
		// Without kern.osproductversion the version comes from sw_vers.
		{"darwin-m1-sw-vers", "arm64", func() fakeSysctl {
			s := appleSysctl("Apple M1", 4, 4, 8, "")
			delete(s.strs, "kern.osproductversion")
			return s
		}(), fakeCommands{
			"system_profiler SPDisplaysDataType -json": "system-profiler-displays-m1.json",
			"sw_vers -productVersion":                  "sw-vers-product-version.txt",
		}},
		{"darwin-m2-pro-under-rosetta", "amd64", appleSysctl("Apple M2 Pro", 8, 4, 32, "15.1"), fakeCommands{
			"system_profiler SPDisplaysDataType -json": "system-profiler-displays-m2-pro.json",
		}},
		{"darwin-intel-mac", "amd64", intelMac, fakeCommands{
			"system_profiler SPDisplaysDataType -json": "system-profiler-displays-intel-mac-radeon.json",
			"sw_vers -productVersion":                  "sw-vers-product-version.txt",
		}},
		{"darwin-nothing-answers", "arm64", fakeSysctl{}, nil},
		// A macOS guest: a "(Virtual)" brand, an empty GPU list, no AGX.
		{"darwin-vm-guest", "arm64", appleSysctl("Apple M2 (Virtual)", 4, 0, 8, "15.3"), fakeCommands{
			"system_profiler SPDisplaysDataType -json": "system-profiler-displays-vm-empty.json",
			"ioreg -rc AGXAccelerator":                 "ioreg-empty.txt",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(Options{Root: t.TempDir()})
			p.goos, p.goarch = "darwin", tt.arch
			p.probers = darwinProbers(tt.sys)
			p.run = tt.cmds.run
			checkGolden(t, tt.name, p.Probe(context.Background()))
		})
	}
}
