package placement

import (
	"testing"

	"einsora.dev/edge/protocol"
)

func mustDriver(t testing.TB, name string) Driver {
	t.Helper()
	d, ok := LookupDriver(name)
	if !ok {
		t.Fatalf("driver %s not in DefaultDrivers", name)
	}
	return d
}

func TestRule5_DriverRunsKindOnAccelerator(t *testing.T) {
	tests := []struct {
		name   string
		driver string
		kind   protocol.Kind
		acc    string
		want   bool
	}{
		{"docker_container_cpu", "docker", protocol.KindContainer, AcceleratorNone, true},
		{"docker_empty_accelerator_is_none", "docker", protocol.KindContainer, "", true},
		{"docker_notebook_nvidia", "docker", protocol.KindNotebook, AcceleratorNvidiaGPU, true},
		{"docker_no_vm", "docker", protocol.KindVM, AcceleratorNone, false},
		{"docker_no_apple_gpu", "docker", protocol.KindContainer, AcceleratorAppleGPU, false},
		{"docker_no_amd_gpu", "docker", protocol.KindContainer, AcceleratorAMDGPU, false},
		{"sandbox_container_cpu", "docker-sandbox", protocol.KindContainer, AcceleratorNone, true},
		{"sandbox_no_gpu", "docker-sandbox", protocol.KindContainer, AcceleratorNvidiaGPU, false},
		{"vz_vm", "vz", protocol.KindVM, AcceleratorNone, true},
		{"vz_no_notebook", "vz", protocol.KindNotebook, AcceleratorNone, false},
		{"vz_no_apple_gpu", "vz", protocol.KindVM, AcceleratorAppleGPU, false},
		{"native_notebook_apple_gpu", "macos-native", protocol.KindNotebook, AcceleratorAppleGPU, true},
		{"native_endpoint_cpu", "macos-native", protocol.KindEndpoint, AcceleratorNone, true},
		{"native_no_container", "macos-native", protocol.KindContainer, AcceleratorNone, false},
		{"native_no_nvidia", "macos-native", protocol.KindNotebook, AcceleratorNvidiaGPU, false},
		{"sim_vm_amd", "sim", protocol.KindVM, AcceleratorAMDGPU, true},
		{"sim_unknown_kind", "sim", "batch", AcceleratorNone, false},
		{"sim_unknown_accelerator", "sim", protocol.KindContainer, "tpu", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustDriver(t, tt.driver).Runs(tt.kind, tt.acc); got != tt.want {
				t.Errorf("%s.Runs(%s, %q): got %v, want %v", tt.driver, tt.kind, tt.acc, got, tt.want)
			}
		})
	}
}

func TestDriverFitsPlatform(t *testing.T) {
	tests := []struct {
		name     string
		driver   string
		os, arch string
		want     bool
	}{
		{"docker_linux_amd64", "docker", "linux", "amd64", true},
		{"docker_linux_arm64", "docker", "linux", "arm64", true},
		{"docker_not_darwin", "docker", "darwin", "arm64", false},
		{"vz_apple_silicon", "vz", "darwin", "arm64", true},
		{"vz_not_intel_mac", "vz", "darwin", "amd64", false},
		{"vz_not_linux_arm64", "vz", "linux", "arm64", false},
		{"native_intel_mac", "macos-native", "darwin", "amd64", true},
		{"native_not_linux", "macos-native", "linux", "amd64", false},
		{"sim_anywhere", "sim", "windows", "riscv64", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustDriver(t, tt.driver).FitsPlatform(tt.os, tt.arch); got != tt.want {
				t.Errorf("%s.FitsPlatform(%s, %s): got %v, want %v", tt.driver, tt.os, tt.arch, got, tt.want)
			}
		})
	}
}

func TestRule5_DriverPerMachineLimit(t *testing.T) {
	tests := []struct {
		name  string
		limit int
		held  int
		want  bool
	}{
		{"no_limit_none_held", 0, 0, true},
		{"no_limit_many_held", 0, 1000, true},
		{"negative_is_no_limit", -1, 5, true},
		{"under_limit", 2, 1, true},
		{"at_limit", 2, 2, false},
		{"over_limit", 2, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Driver{Name: "x", PerMachineLimit: tt.limit}
			if got := d.Allows(tt.held); got != tt.want {
				t.Errorf("limit %d, held %d: got %v, want %v", tt.limit, tt.held, got, tt.want)
			}
		})
	}
}

func TestDriverTable(t *testing.T) {
	tab := DriverTable([]Driver{
		{Name: "a", Isolation: protocol.IsolationVM},
		{Name: "b"},
		{Name: "a", Isolation: protocol.IsolationProcess},
	})
	if len(tab) != 2 {
		t.Fatalf("got %d rows, want 2", len(tab))
	}
	if got := tab["a"].Isolation; got != protocol.IsolationVM {
		t.Errorf("duplicate name: got isolation %v, want the first row's vm", got)
	}
	if got := len(DriverTable(DefaultDrivers)); got != len(DefaultDrivers) {
		t.Errorf("DefaultDrivers has a repeated name: %d rows, %d names", len(DefaultDrivers), got)
	}
}

func TestDriverOS(t *testing.T) {
	tests := []struct {
		name   string
		driver string
		wantOS string
		wantOK bool
	}{
		{"docker", "docker", "linux", true},
		{"docker_sandbox", "docker-sandbox", "linux", true},
		{"vz", "vz", "darwin", true},
		{"macos_native", "macos-native", "darwin", true},
		{"sim_any", "sim", "", true},
		{"unknown", "podman", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os, ok := DriverOS(tt.driver)
			if os != tt.wantOS || ok != tt.wantOK {
				t.Errorf("DriverOS(%s): got %q, %v, want %q, %v", tt.driver, os, ok, tt.wantOS, tt.wantOK)
			}
		})
	}
}

// TestDefaultDriversTrust pins the trust-relevant columns of the table.
func TestRule5_IsolationFromTheHubsTable(t *testing.T) {
	tests := []struct {
		driver    string
		isolation protocol.Isolation
		weak      bool
		limit     int
	}{
		{"docker", protocol.IsolationContainer, true, 0},
		{"docker-sandbox", protocol.IsolationSandbox, false, 0},
		{"vz", protocol.IsolationVM, false, 2},
		{"macos-native", protocol.IsolationProcess, true, 0},
		{"sim", protocol.IsolationVM, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.driver, func(t *testing.T) {
			d := mustDriver(t, tt.driver)
			if d.Isolation != tt.isolation || d.Weak != tt.weak || d.PerMachineLimit != tt.limit {
				t.Errorf("got isolation %v weak %v limit %d, want %v %v %d",
					d.Isolation, d.Weak, d.PerMachineLimit, tt.isolation, tt.weak, tt.limit)
			}
		})
	}
	for _, d := range DefaultDrivers {
		if d.Isolation <= protocol.IsolationContainer && !d.Weak {
			t.Errorf("driver %s isolates only at %v but is not marked weak", d.Name, d.Isolation)
		}
		if d.Runs(protocol.KindContainer, AcceleratorAppleGPU) || d.Runs(protocol.KindNotebook, AcceleratorAppleGPU) {
			if d.Name != "macos-native" && d.Name != "sim" {
				t.Errorf("driver %s drives the Apple GPU; only macos-native (and sim) should", d.Name)
			}
		}
	}
}

// vz's limit counts and caps macOS guests only: Linux guests neither count
// toward it nor wait for it.
func TestRule5_VZLimitCountsMacOSGuestsOnly(t *testing.T) {
	linuxHeld := func(id string) Held {
		return Held{Workload: id, Driver: "vz", Kind: protocol.KindVM, CPUs: 1, MemoryMB: 2048, Image: linuxRaw}
	}
	tests := []struct {
		name    string
		holding []Held
		image   string
		fits    bool
	}{
		{"macos_under_limit", []Held{vzHeld("a")}, macIPSW, true},
		{"macos_at_limit", []Held{vzHeld("a"), vzHeld("b")}, macIPSW, false},
		{"guest_option_macos_at_limit", []Held{vzHeld("a"), vzHeld("b")}, "/img/disk.img#guest=macos", false},
		{"linux_beside_two_macos", []Held{vzHeld("a"), vzHeld("b")}, linuxRaw, true},
		{"macos_beside_linux_guests", []Held{linuxHeld("a"), linuxHeld("b"), linuxHeld("c")}, macIPSW, true},
		{"linux_beside_many_linux", []Held{linuxHeld("a"), linuxHeld("b"), linuxHeld("c")}, linuxRaw, true},
		{"guest_option_linux_not_counted", []Held{vzHeld("a"), vzHeld("b")}, "/img/x.ipsw#guest=linux", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := with(mac("m-1", "acme", "r"), holding(tt.holding...))
			m.CPUs, m.MemoryMB = 64, 1<<20
			f := NewFleet([]Machine{m}, withoutSim())
			_, err := f.Place(withImage(wl("w", "acme", "r", protocol.KindVM, "cpu-1"), tt.image), class(t, "cpu-1"))
			if (err == nil) != tt.fits {
				t.Fatalf("image %q beside %d held: err %v, want fits=%v", tt.image, len(tt.holding), err, tt.fits)
			}
		})
	}
	for image, want := range map[string]bool{
		macIPSW: true, "https://h/x.IPSW?sig=1": true, "/a/b.ipsw#sha256=00": true,
		linuxRaw: false, "/a/disk.raw#guest=macos": true, "": false, "/a/x.ipsw#guest=linux": false,
	} {
		if got := MacOSGuestImage(image); got != want {
			t.Errorf("MacOSGuestImage(%q) = %v, want %v", image, got, want)
		}
	}
}

// Rule 5, the limit as the machine counts it: a Mac whose OS refused a
// macOS guest below the limit withdraws vz's limited capacity, and no macOS
// guest is placed there until it clears; Linux guests still are.
func TestRule5_WithdrawnVZCapacityPlacesNoMacOSGuest(t *testing.T) {
	for _, tt := range []struct {
		name      string
		withdrawn []string
		image     string
		fits      bool
	}{
		{"macos_offered", nil, macIPSW, true},
		{"macos_withdrawn", []string{"vz"}, macIPSW, false},
		{"linux_while_withdrawn", []string{"vz"}, linuxRaw, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := with(mac("m-1", "acme", "r"), holding(vzHeld("a")))
			m.CPUs, m.MemoryMB, m.Withdrawn = 64, 1<<20, tt.withdrawn
			f := NewFleet([]Machine{m}, withoutSim())
			_, err := f.Place(withImage(wl("w", "acme", "r", protocol.KindVM, "cpu-1"), tt.image), class(t, "cpu-1"))
			if (err == nil) != tt.fits {
				t.Fatalf("withdrawn %v, image %q: err %v, want fits=%v", tt.withdrawn, tt.image, err, tt.fits)
			}
		})
	}
}
