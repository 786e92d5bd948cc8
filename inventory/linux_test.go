package inventory

import (
	"context"
	"path/filepath"
	"testing"
)

// TestProbeLinuxTrees probes sysfs and /proc trees of machines this host is
// not, and compares the inventories with testdata/<name>.golden.
func TestProbeLinuxTrees(t *testing.T) {
	smi8 := fakeCommands{"nvidia-smi -q -x": "nvidia-smi-8gpu-h100.xml"}
	tests := []struct {
		name string
		tree string
		arch string // "" is amd64
		cmds fakeCommands
	}{
		{"linux-8gpu-nvidia", "linux-8gpu-nvidia", "", smi8},
		{"linux-8gpu-nvidia-no-smi", "linux-8gpu-nvidia", "", nil},
		{"linux-8gpu-nvidia-smi-fails", "linux-8gpu-nvidia", "", fakeCommands{
			"nvidia-smi -q -x": "!nvidia-smi: exit status 18: Failed to initialize NVML: Driver/library version mismatch",
		}},
		{"linux-2gpu-amd", "linux-2gpu-amd", "", nil},
		{"linux-amd-without-kfd", "linux-amd-without-kfd", "", nil},
		{"linux-intel-arc", "linux-intel-arc", "", nil},
		{"linux-container-cgroup-limit", "linux-container-cgroup-limit", "", nil},
		{"linux-container-cgroup-v1-limit", "linux-container-cgroup-v1-limit", "", nil},
		{"linux-arm64-nvidia-devnodes-only", "linux-arm64-nvidia-devnodes-only", "arm64", nil},
		{"linux-partial-unreadable", "linux-partial-unreadable", "", nil},
		{"linux-empty-root", "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if tt.tree != "" {
				root = filepath.Join("testdata", tt.tree)
			}
			p := treeProber(root, tt.cmds)
			if tt.arch != "" {
				p.goarch = tt.arch
			}
			inv := p.Probe(context.Background())
			checkGolden(t, tt.name, inv)
		})
	}
}

func TestCountCPUList(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int
		wantErr bool
	}{
		{"single", "0", 1, false},
		{"range", "0-63", 64, false},
		{"ranges_and_single", "0-3,8-11,16", 9, false},
		{"trailing_newline", "0-1\n", 2, false},
		{"empty", "", 0, true},
		{"backwards", "5-2", 0, true},
		{"garbage", "zero-one", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := countCPUList(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("countCPUList(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseOSRelease(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"pretty_name_quoted", "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n", "Debian GNU/Linux 12 (bookworm)"},
		{"single_quotes", "PRETTY_NAME='Fedora Linux 41'\n", "Fedora Linux 41"},
		{"unquoted", "PRETTY_NAME=Alpine\n", "Alpine"},
		{"escaped_quote", `PRETTY_NAME="A \"quoted\" OS"` + "\n", `A "quoted" OS`},
		{"name_and_version_without_pretty", "NAME=Alpine Linux\nVERSION_ID=3.20.3\n", "Alpine Linux 3.20.3"},
		{"comment_ignored", "# PRETTY_NAME=nope\nPRETTY_NAME=yes\n", "yes"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseOSRelease([]byte(tt.in)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseCPUModel(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"x86_model_name", "processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n", "AMD EPYC 9654 96-Core Processor"},
		{"arm_neoverse_v2", "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n", "Arm Neoverse-V2"},
		{"arm_unknown_part", "CPU implementer\t: 0xc0\nCPU part\t: 0xfff\n", "Arm implementer 0xc0 part 0xfff"},
		{"nothing", "processor\t: 0\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseCPUModel([]byte(tt.in)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestParseCPUModelArm reads arm64 cpuinfo shaped like real machines':
// known parts named, big cores first with each cluster's count.
func TestParseCPUModelArm(t *testing.T) {
	tests := []struct{ file, want string }{
		{"cpuinfo-rpi4.txt", "Cortex-A72"},
		{"cpuinfo-rpi5.txt", "Cortex-A76"},
		{"cpuinfo-graviton2.txt", "Arm Neoverse-N1"},
		{"cpuinfo-graviton3.txt", "Arm Neoverse-V1"},
		{"cpuinfo-ampere-altra.txt", "Arm Neoverse-N1"},
		{"cpuinfo-ampereone.txt", "AmpereOne"},
		{"cpuinfo-a64fx.txt", "Fujitsu A64FX"},
		{"cpuinfo-thunderx2.txt", "Cavium ThunderX2"},
		{"cpuinfo-phone-x1-a78-a55.txt", "Cortex-X1 ×1 + Cortex-A78 ×3 + Cortex-A55 ×4"},
		{"cpuinfo-asahi-m1.txt", "Apple Firestorm ×4 + Apple Icestorm ×4"},
		// An unknown part keeps its numbers and, of no known size, comes
		// after the known ones.
		{"cpuinfo-unknown-part.txt", "Cortex-A55 ×2 + Arm implementer 0x51 part 0x001 ×2"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			if got := parseCPUModel(readTestdata(t, tt.file)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseMemTotal(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    uint64
		wantErr bool
	}{
		{"kb", "MemFree: 1 kB\nMemTotal:       24683620 kB\n", 24683620 << 10, false},
		{"missing", "MemFree: 1 kB\n", 0, true},
		{"bad_unit", "MemTotal: 5 MB\n", 0, true},
		{"bad_number", "MemTotal: lots kB\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMemTotal([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("got %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
