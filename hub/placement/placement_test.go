package placement

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"einsora.dev/edge/protocol"
)

const (
	ct = protocol.KindContainer
	vm = protocol.KindVM
	nb = protocol.KindNotebook
	ep = protocol.KindEndpoint
)

// macIPSW and linuxRaw are vz images of a macOS and a Linux guest.
const (
	macIPSW  = "https://img.example/UniversalMac_15.ipsw"
	linuxRaw = "https://img.example/debian.raw.gz"
)

// vzHeld is a macOS guest held with vz.
func vzHeld(id string) Held {
	return Held{Workload: id, Driver: "vz", Kind: vm, CPUs: 1, MemoryMB: 2048, Image: macIPSW}
}

func withImage(w Workload, image string) Workload { w.Image = image; return w }

func sticky(w Workload, machine, driver string) Workload {
	w.HeldMachine, w.HeldDriver = machine, driver
	return w
}

// withoutSim is the production table: DefaultDrivers less sim.
func withoutSim() []Driver {
	return slices.DeleteFunc(slices.Clone(DefaultDrivers), func(d Driver) bool { return d.Name == "sim" })
}

type placeCase struct {
	name     string
	machines []Machine
	w        Workload
	class    string
	cls      *Class   // overrides class
	drivers  []Driver // nil: DefaultDrivers
	want     Decision
	reason   string // set when a *NoFit is wanted
}

func runPlaceCases(t *testing.T, tests []placeCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Class
			if tt.cls != nil {
				c = *tt.cls
			} else {
				c = class(t, tt.class)
			}
			ds := tt.drivers
			if ds == nil {
				ds = DefaultDrivers
			}
			got, err := Place(tt.w, c, tt.machines, ds)
			if tt.reason != "" {
				var nf *NoFit
				if !errors.As(err, &nf) {
					t.Fatalf("got %+v, %v; want *NoFit %q", got, err, tt.reason)
				}
				if nf.Reason != tt.reason {
					t.Errorf("got reason\n\t%q\nwant\n\t%q", nf.Reason, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want %+v", err, tt.want)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestPlaceChooses(t *testing.T) {
	acme := func(id string, k protocol.Kind, cl string) Workload { return wl(id, "acme", "eu-west", k, cl) }
	runPlaceCases(t, []placeCase{
		{name: "cpu_container_strongest_driver", machines: []Machine{linux("m-1", "acme", "eu-west", 0)},
			w: acme("w", ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "m-1", Driver: "docker-sandbox", Isolation: protocol.IsolationSandbox}},
		{name: "weak_docker_when_sandbox_not_offered", machines: []Machine{with(linux("m-1", "acme", "eu-west", 0), drivers("docker"))},
			w: acme("w", ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "m-1", Driver: "docker", Isolation: protocol.IsolationContainer}},
		{name: "nvidia_notebook_on_docker", machines: []Machine{linux("m-1", "acme", "eu-west", 1)},
			w: acme("w", nb, "nvidia-1"), class: "nvidia-1",
			want: Decision{Machine: "m-1", Driver: "docker", Isolation: protocol.IsolationContainer, Devices: []string{"nvidia:GPU-0"}}},
		{name: "apple_gpu_notebook_native", machines: []Machine{mac("m-1", "acme", "eu-west")},
			w: acme("w", nb, "apple-gpu"), class: "apple-gpu",
			want: Decision{Machine: "m-1", Driver: "macos-native", Isolation: protocol.IsolationProcess, Devices: []string{"apple-gpu:0"}}},
		{name: "vm_on_vz", machines: []Machine{mac("m-1", "acme", "eu-west")},
			w: acme("w", vm, "cpu-2"), class: "cpu-2",
			want: Decision{Machine: "m-1", Driver: "vz", Isolation: protocol.IsolationVM}},
		{name: "cpu_endpoint_on_mac_native", machines: []Machine{mac("m-1", "acme", "eu-west")},
			w: acme("w", ep, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "m-1", Driver: "macos-native", Isolation: protocol.IsolationProcess}},
		{name: "sim_outranks_docker", machines: []Machine{with(linux("m-1", "acme", "eu-west", 0), drivers("docker", "docker-sandbox", "sim"))},
			w: acme("w", ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "m-1", Driver: "sim", Isolation: protocol.IsolationVM}},
		{name: "only_own_machines", machines: []Machine{linux("m-1", "globex", "eu-west", 0), linux("m-2", "acme", "eu-west", 0)},
			w: acme("w", ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "m-2", Driver: "docker-sandbox", Isolation: protocol.IsolationSandbox}},
		{name: "only_own_region", machines: []Machine{linux("m-1", "acme", "us-east", 0), linux("m-2", "acme", "eu-west", 0)},
			w: acme("w", ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "m-2", Driver: "docker-sandbox", Isolation: protocol.IsolationSandbox}},
		{name: "offline_never_chosen", machines: []Machine{with(linux("m-1", "acme", "eu-west", 0), size(1, 2048), offline), linux("m-2", "acme", "eu-west", 0)},
			w: acme("w", ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "m-2", Driver: "docker-sandbox", Isolation: protocol.IsolationSandbox}},
		{name: "driver_of_other_os_ignored", machines: []Machine{with(linux("m-1", "acme", "eu-west", 0), drivers("vz", "docker"))},
			w: acme("w", ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "m-1", Driver: "docker", Isolation: protocol.IsolationContainer}},
		{name: "vz_at_limit_falls_to_next_driver", machines: []Machine{with(linux("m-1", "acme", "eu-west", 0),
			drivers("docker", "sim"), holding(Held{Workload: "x", Driver: "sim"}, Held{Workload: "y", Driver: "sim"}))},
			drivers: append(withoutSim(), Driver{Name: "sim", Isolation: protocol.IsolationVM, Kinds: protocol.Kinds, Accelerators: []string{AcceleratorNone}, PerMachineLimit: 2}),
			w:       acme("w", ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "m-1", Driver: "docker", Isolation: protocol.IsolationContainer}},
	})
}

func TestPlaceBestFit(t *testing.T) {
	acme := func(k protocol.Kind, cl string) Workload { return wl("w", "acme", "eu-west", k, cl) }
	busy := func(cpus, mem int) func(*Machine) {
		return holding(Held{Workload: "busy", Driver: "docker", CPUs: cpus, MemoryMB: mem})
	}
	runPlaceCases(t, []placeCase{
		{name: "keeps_gpu_box_free_for_gpu_work", machines: []Machine{linux("a-gpu", "acme", "eu-west", 8), with(linux("b-cpu", "acme", "eu-west", 0), size(64, 262144))},
			w: acme(ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "b-cpu", Driver: "docker-sandbox", Isolation: protocol.IsolationSandbox}},
		{name: "fewest_free_gpus_left", machines: []Machine{linux("a", "acme", "eu-west", 8), linux("b", "acme", "eu-west", 1)},
			w: acme(nb, "nvidia-1"), class: "nvidia-1",
			want: Decision{Machine: "b", Driver: "docker", Isolation: protocol.IsolationContainer, Devices: []string{"nvidia:GPU-0"}}},
		{name: "fewest_free_cpus_left", machines: []Machine{linux("a", "acme", "eu-west", 0), with(linux("b", "acme", "eu-west", 0), busy(12, 0))},
			w: acme(ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "b", Driver: "docker-sandbox", Isolation: protocol.IsolationSandbox}},
		{name: "then_least_memory_left", machines: []Machine{with(linux("a", "acme", "eu-west", 0), busy(4, 1024)), with(linux("b", "acme", "eu-west", 0), busy(4, 4096))},
			w: acme(ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "b", Driver: "docker-sandbox", Isolation: protocol.IsolationSandbox}},
		{name: "then_lowest_id", machines: []Machine{linux("m-2", "acme", "eu-west", 0), linux("m-1", "acme", "eu-west", 0), linux("m-3", "acme", "eu-west", 0)},
			w: acme(ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "m-1", Driver: "docker-sandbox", Isolation: protocol.IsolationSandbox}},
		{name: "machine_too_full_skipped", machines: []Machine{with(linux("a", "acme", "eu-west", 0), busy(16, 0)), linux("b", "acme", "eu-west", 0)},
			w: acme(ct, "cpu-1"), class: "cpu-1",
			want: Decision{Machine: "b", Driver: "docker-sandbox", Isolation: protocol.IsolationSandbox}},
		{name: "lowest_free_device", machines: []Machine{with(linux("a", "acme", "eu-west", 4), holding(
			Held{Workload: "x", Driver: "docker", Devices: []string{"nvidia:GPU-0"}},
			Held{Workload: "y", Driver: "docker", Devices: []string{"nvidia:GPU-2"}}))},
			w: acme(nb, "nvidia-1"), class: "nvidia-1",
			want: Decision{Machine: "a", Driver: "docker", Isolation: protocol.IsolationContainer, Devices: []string{"nvidia:GPU-1"}}},
		{name: "lowest_free_devices_two", machines: []Machine{with(linux("a", "acme", "eu-west", 4), holding(
			Held{Workload: "x", Driver: "docker", Devices: []string{"nvidia:GPU-0"}}))},
			w: acme(nb, "nvidia-2"), cls: &Class{Name: "nvidia-2", Accelerator: AcceleratorNvidiaGPU, Devices: 2, CPUs: 8, MemoryMB: 32768},
			want: Decision{Machine: "a", Driver: "docker", Isolation: protocol.IsolationContainer, Devices: []string{"nvidia:GPU-1", "nvidia:GPU-2"}}},
	})
}

func TestPlaceDriverPolicy(t *testing.T) {
	table := []Driver{
		{Name: "b-weak", Isolation: protocol.IsolationSandbox, Weak: true, Kinds: protocol.Kinds, Accelerators: []string{AcceleratorNone}},
		{Name: "c-strong", Isolation: protocol.IsolationSandbox, Kinds: protocol.Kinds, Accelerators: []string{AcceleratorNone}},
		{Name: "a-strong", Isolation: protocol.IsolationSandbox, Kinds: protocol.Kinds, Accelerators: []string{AcceleratorNone}},
		{Name: "z-process", Isolation: protocol.IsolationProcess, Weak: true, Kinds: protocol.Kinds, Accelerators: []string{AcceleratorNone}},
	}
	m := func(ds ...string) []Machine { return []Machine{with(linux("m", "acme", "r", 0), drivers(ds...))} }
	w := wl("w", "acme", "r", ct, "cpu-1")
	runPlaceCases(t, []placeCase{
		{name: "strong_before_weak_then_name", machines: m("b-weak", "c-strong", "a-strong", "z-process"), drivers: table, w: w, class: "cpu-1",
			want: Decision{Machine: "m", Driver: "a-strong", Isolation: protocol.IsolationSandbox}},
		{name: "strong_before_weak", machines: m("b-weak", "c-strong", "z-process"), drivers: table, w: w, class: "cpu-1",
			want: Decision{Machine: "m", Driver: "c-strong", Isolation: protocol.IsolationSandbox}},
		{name: "higher_isolation_first", machines: m("b-weak", "z-process"), drivers: table, w: w, class: "cpu-1",
			want: Decision{Machine: "m", Driver: "b-weak", Isolation: protocol.IsolationSandbox}},
		{name: "agent_offers_unknown_driver", machines: m("podman", "z-process"), drivers: table, w: w, class: "cpu-1",
			want: Decision{Machine: "m", Driver: "z-process", Isolation: protocol.IsolationProcess}},
	})
}

func TestPlaceReasons(t *testing.T) {
	const where = "no machine of tenant acme in region eu-west"
	acme := func(k protocol.Kind, cl string) Workload { return wl("w", "acme", "eu-west", k, cl) }
	gpuHeld := holding(Held{Workload: "x", Driver: "macos-native", Kind: nb, CPUs: 4, MemoryMB: 16384, Devices: []string{"apple-gpu:0"}})
	runPlaceCases(t, []placeCase{
		{name: "no_machines", w: acme(ct, "cpu-1"), class: "cpu-1",
			reason: "tenant acme has no machine in region eu-west"},
		{name: "only_other_tenants", machines: []Machine{linux("m-1", "globex", "eu-west", 0)}, w: acme(ct, "cpu-1"), class: "cpu-1",
			reason: "tenant acme has no machine in region eu-west"},
		{name: "only_other_region", machines: []Machine{linux("m-1", "acme", "us-east", 0)}, w: acme(ct, "cpu-1"), class: "cpu-1",
			reason: "tenant acme has no machine in region eu-west"},
		{name: "no_region", machines: []Machine{linux("m-1", "acme", "eu-west", 0)}, w: wl("w", "acme", "", ct, "cpu-1"), class: "cpu-1",
			reason: "tenant acme has no machine"},
		{name: "no_accelerator", machines: []Machine{mac("m-1", "acme", "eu-west"), linux("m-2", "acme", "eu-west", 0)}, w: acme(nb, "nvidia-1"), class: "nvidia-1",
			reason: where + " has an NVIDIA GPU"},
		{name: "not_enough_devices", machines: []Machine{linux("m-1", "acme", "eu-west", 1)}, w: acme(nb, "nvidia-2"),
			cls:    &Class{Name: "nvidia-2", Accelerator: AcceleratorNvidiaGPU, Devices: 2, CPUs: 8, MemoryMB: 32768},
			reason: where + " has 2 NVIDIA GPUs"},
		{name: "too_small", machines: []Machine{with(linux("m-1", "acme", "eu-west", 0), size(2, 65536))}, w: acme(ct, "cpu-4"), class: "cpu-4",
			reason: where + " is big enough for class cpu-4 (4 CPUs, 8192 MB of memory)"},
		{name: "no_driver_runs_vm", machines: []Machine{linux("m-1", "acme", "eu-west", 0)}, w: acme(vm, "cpu-1"), class: "cpu-1",
			reason: where + " offers a driver that runs a VM"},
		{name: "no_driver_offered_for_gpu", machines: []Machine{with(linux("m-1", "acme", "eu-west", 1), drivers("docker-sandbox"))}, w: acme(ct, "nvidia-1"), class: "nvidia-1",
			reason: where + " offers a driver that runs a container with an NVIDIA GPU"},
		{name: "vm_with_apple_gpu", machines: []Machine{mac("m-1", "acme", "eu-west")}, w: acme(vm, "apple-gpu"), class: "apple-gpu", drivers: withoutSim(),
			reason: "no driver runs a VM with an Apple GPU"},
		{name: "no_driver_in_table", machines: []Machine{linux("m-1", "acme", "eu-west", 0)}, w: acme(ct, "amd"), drivers: withoutSim(),
			cls:    &Class{Name: "amd", Accelerator: AcceleratorAMDGPU, Devices: 1, CPUs: 1, MemoryMB: 1},
			reason: "no driver runs a container with an AMD GPU"},
		{name: "offline", machines: []Machine{with(linux("m-1", "acme", "eu-west", 0), offline)}, w: acme(ct, "cpu-1"), class: "cpu-1",
			reason: where + " that could run it is online"},
		{name: "offline_gpu_box_beats_online_cpu_box", machines: []Machine{with(linux("m-1", "acme", "eu-west", 1), offline), linux("m-2", "acme", "eu-west", 0)},
			w: acme(nb, "nvidia-1"), class: "nvidia-1",
			reason: where + " that could run it is online"},
		{name: "vz_limit", machines: []Machine{with(mac("m-1", "acme", "eu-west"), holding(vzHeld("a"), vzHeld("b")))}, w: withImage(acme(vm, "cpu-1"), macIPSW), class: "cpu-1",
			reason: where + " can run another vz workload (2 per machine)"},
		// Both at a driver's limit: the first machine by ID names its
		// driver, though the other, the better fit, was tried first.
		{name: "limit_tie_named_by_first_id", machines: []Machine{
			with(linux("m-1", "acme", "eu-west", 0), drivers("lim-b"), holding(Held{Workload: "x", Driver: "lim-b"})),
			with(linux("m-2", "acme", "eu-west", 0), drivers("lim-a"), holding(Held{Workload: "y", Driver: "lim-a", CPUs: 8})),
		}, w: acme(ct, "cpu-1"), class: "cpu-1", drivers: append(withoutSim(),
			Driver{Name: "lim-a", Isolation: protocol.IsolationVM, Kinds: protocol.Kinds, Accelerators: []string{AcceleratorNone}, PerMachineLimit: 1},
			Driver{Name: "lim-b", Isolation: protocol.IsolationVM, Kinds: protocol.Kinds, Accelerators: []string{AcceleratorNone}, PerMachineLimit: 1}),
			reason: where + " can run another lim-b workload (1 per machine)"},
		{name: "gpu_busy", machines: []Machine{with(mac("m-1", "acme", "eu-west"), gpuHeld)}, w: acme(nb, "apple-gpu"), class: "apple-gpu",
			reason: where + " has a free Apple GPU"},
		{name: "gpus_busy_two", machines: []Machine{with(linux("m-1", "acme", "eu-west", 2), holding(Held{Workload: "x", Driver: "docker", Devices: []string{"nvidia:GPU-1"}}))},
			w: acme(nb, "nvidia-2"), cls: &Class{Name: "nvidia-2", Accelerator: AcceleratorNvidiaGPU, Devices: 2, CPUs: 8, MemoryMB: 32768},
			reason: where + " has 2 free NVIDIA GPUs"},
		{name: "cpus_busy", machines: []Machine{with(linux("m-1", "acme", "eu-west", 0), holding(Held{Workload: "x", Driver: "docker", CPUs: 14}))},
			w: acme(ct, "cpu-4"), class: "cpu-4",
			reason: where + " has 4 free CPUs"},
		{name: "one_cpu_busy", machines: []Machine{with(linux("m-1", "acme", "eu-west", 0), holding(Held{Workload: "x", Driver: "docker", CPUs: 16}))},
			w: acme(ct, "cpu-1"), class: "cpu-1",
			reason: where + " has a free CPU"},
		{name: "memory_busy", machines: []Machine{with(linux("m-1", "acme", "eu-west", 0), holding(Held{Workload: "x", Driver: "docker", MemoryMB: 60000}))},
			w: acme(ct, "cpu-4"), class: "cpu-4",
			reason: where + " has 8192 MB of memory free"},
		{name: "most_specific_wins", machines: []Machine{
			with(linux("m-1", "acme", "eu-west", 1), offline),
			linux("m-2", "acme", "eu-west", 0),
			with(linux("m-3", "acme", "eu-west", 1), holding(Held{Workload: "x", Driver: "docker", Devices: []string{"nvidia:GPU-0"}})),
			with(linux("m-4", "acme", "eu-west", 1), drivers("docker-sandbox")),
		}, w: acme(nb, "nvidia-1"), class: "nvidia-1",
			reason: where + " has a free NVIDIA GPU"},
		{name: "unknown_kind", machines: []Machine{linux("m-1", "acme", "eu-west", 0)}, w: acme("batch", "cpu-1"), class: "cpu-1",
			reason: `kind "batch" is not one einsora runs`},
		{name: "invalid_class", machines: []Machine{linux("m-1", "acme", "eu-west", 0)}, w: acme(ct, "broken"),
			cls:    &Class{Name: "broken", Accelerator: AcceleratorNone, Devices: 1},
			reason: "class broken is not valid"},
		{name: "negative_class", machines: []Machine{linux("m-1", "acme", "eu-west", 0)}, w: acme(ct, "neg"),
			cls:    &Class{Name: "neg", CPUs: -1},
			reason: "class neg is not valid"},
		{name: "already_placed", machines: []Machine{with(linux("m-1", "acme", "eu-west", 0), holding(Held{Workload: "w", Driver: "docker", CPUs: 1}))},
			w: acme(ct, "cpu-1"), class: "cpu-1",
			reason: "it is already placed on machine m-1"},
	})
}

func TestRule5_StickyReturnsToItsDisk(t *testing.T) {
	acme := func(k protocol.Kind, cl, machine, driver string) Workload {
		return sticky(wl("w", "acme", "eu-west", k, cl), machine, driver)
	}
	const held = "machine m-2, which holds its disk,"
	fleet := func(m2 ...func(*Machine)) []Machine {
		// m-1 is the better fit for anything; m-2 holds the disk.
		return []Machine{with(mac("m-1", "acme", "eu-west"), size(10, 32768)), with(mac("m-2", "acme", "eu-west"), append([]func(*Machine){size(24, 131072)}, m2...)...)}
	}
	runPlaceCases(t, []placeCase{
		{name: "goes_back", machines: fleet(), w: acme(vm, "cpu-2", "m-2", "vz"), class: "cpu-2",
			want: Decision{Machine: "m-2", Driver: "vz", Isolation: protocol.IsolationVM}},
		{name: "goes_back_with_held_driver_not_preferred", machines: fleet(func(m *Machine) { m.Drivers = append(m.Drivers, "sim") }),
			w: acme(nb, "cpu-2", "m-2", "macos-native"), class: "cpu-2",
			want: Decision{Machine: "m-2", Driver: "macos-native", Isolation: protocol.IsolationProcess}},
		{name: "no_held_driver_uses_policy", machines: fleet(func(m *Machine) { m.Drivers = append(m.Drivers, "sim") }),
			w: acme(nb, "cpu-2", "m-2", ""), class: "cpu-2",
			want: Decision{Machine: "m-2", Driver: "sim", Isolation: protocol.IsolationVM}},
		{name: "offline_waits", machines: fleet(offline), w: acme(vm, "cpu-2", "m-2", "vz"), class: "cpu-2",
			reason: "waiting for " + held + " to come online"},
		{name: "absent_waits", machines: fleet()[:1], w: acme(vm, "cpu-2", "m-2", "vz"), class: "cpu-2",
			reason: "waiting for " + held + " to come online"},
		{name: "full_cpus_waits", machines: fleet(holding(Held{Workload: "x", Driver: "macos-native", CPUs: 23})),
			w: acme(vm, "cpu-2", "m-2", "vz"), class: "cpu-2",
			reason: "waiting for " + held + " to have 2 free CPUs"},
		{name: "full_memory_waits", machines: fleet(holding(Held{Workload: "x", Driver: "macos-native", MemoryMB: 131072})),
			w: acme(vm, "cpu-2", "m-2", "vz"), class: "cpu-2",
			reason: "waiting for " + held + " to have 4096 MB of memory free"},
		{name: "gpu_busy_waits", machines: fleet(holding(Held{Workload: "x", Driver: "macos-native", Devices: []string{"apple-gpu:0"}})),
			w: acme(nb, "apple-gpu", "m-2", "macos-native"), class: "apple-gpu",
			reason: "waiting for " + held + " to have a free Apple GPU"},
		{name: "vz_limit_waits", machines: fleet(holding(vzHeld("a"), vzHeld("b"))), w: withImage(acme(vm, "cpu-2", "m-2", "vz"), macIPSW), class: "cpu-2",
			reason: "waiting for " + held + " to run fewer than 2 vz workloads"},
		{name: "driver_not_offered_waits", machines: fleet(drivers("macos-native")), w: acme(vm, "cpu-2", "m-2", "vz"), class: "cpu-2",
			reason: "waiting for " + held + " to offer driver vz"},
		{name: "no_held_driver_none_offered", machines: fleet(drivers()), w: acme(vm, "cpu-2", "m-2", ""), class: "cpu-2",
			reason: "waiting for " + held + " to offer a driver that runs a VM"},
		{name: "held_driver_cannot_run_it", machines: fleet(), w: acme(nb, "cpu-2", "m-2", "vz"), class: "cpu-2",
			reason: "driver vz, which holds its data, does not run a notebook"},
		{name: "held_driver_unknown", machines: fleet(), w: acme(vm, "cpu-2", "m-2", "qemu"), class: "cpu-2",
			reason: "driver qemu, which holds its data, is not in the hub's driver table"},
		{name: "machine_changed_owner", machines: fleet(func(m *Machine) { m.Owner = "globex" }), w: acme(vm, "cpu-2", "m-2", "vz"), class: "cpu-2",
			reason: held + " is not tenant acme's machine in region eu-west"},
		{name: "no_accelerator", machines: fleet(func(m *Machine) { m.Devices = nil }), w: acme(nb, "apple-gpu", "m-2", "macos-native"), class: "apple-gpu",
			reason: held + " has no Apple GPU"},
		{name: "too_few_devices", machines: []Machine{linux("m-2", "acme", "eu-west", 1)},
			w: acme(nb, "nvidia-2", "m-2", "docker"), cls: &Class{Name: "nvidia-2", Accelerator: AcceleratorNvidiaGPU, Devices: 2, CPUs: 8, MemoryMB: 32768},
			reason: held + " has fewer than 2 NVIDIA GPUs"},
		{name: "too_small", machines: fleet(size(2, 131072)), w: acme(vm, "cpu-4", "m-2", "vz"), class: "cpu-4",
			reason: held + " is too small for class cpu-4 (4 CPUs, 8192 MB of memory)"},
		{name: "container_may_move", machines: []Machine{linux("m-1", "acme", "eu-west", 0), with(linux("m-2", "acme", "eu-west", 0), offline)},
			w: acme(ct, "cpu-1", "m-2", "docker"), class: "cpu-1",
			want: Decision{Machine: "m-1", Driver: "docker-sandbox", Isolation: protocol.IsolationSandbox}},
		{name: "endpoint_may_move", machines: []Machine{linux("m-1", "acme", "eu-west", 0), with(linux("m-2", "acme", "eu-west", 0), offline)},
			w: acme(ep, "cpu-1", "m-2", "docker"), class: "cpu-1",
			want: Decision{Machine: "m-1", Driver: "docker-sandbox", Isolation: protocol.IsolationSandbox}},
		{name: "notebook_on_linux_waits", machines: []Machine{linux("m-1", "acme", "eu-west", 0), with(linux("m-2", "acme", "eu-west", 0), offline)},
			w: acme(nb, "cpu-1", "m-2", "docker"), class: "cpu-1",
			reason: "waiting for " + held + " to come online"},
		{name: "already_running_somewhere", machines: []Machine{with(mac("m-1", "acme", "eu-west"), holding(vzHeld("w"))), mac("m-2", "acme", "eu-west")},
			w: acme(vm, "cpu-2", "m-2", "vz"), class: "cpu-2",
			reason: "it is already placed on machine m-1"},
	})
}

// TestReasonTexts covers every stage's sentence, including those that the
// rules cannot reach until sharing (stagePermit).
func TestReasonTexts(t *testing.T) {
	f := NewFleet(nil, DefaultDrivers)
	vz := slices.IndexFunc(f.drivers, func(d Driver) bool { return d.Name == "vz" })
	c := class(t, "apple-gpu")
	w := wl("w", "acme", "eu-west", nb, "apple-gpu")
	w.Ports = []protocol.Port{{Host: 8080, Container: 80}}
	w.Needs = []string{protocol.FeatureSpec}
	s := sticky(w, "m-1", "macos-native")
	tests := []struct {
		name  string
		stage stage
		w     Workload
		want  string
	}{
		{"host", stageHost, w, "tenant acme has no machine in region eu-west"},
		{"accelerator", stageAccelerator, w, "no machine of tenant acme in region eu-west has an Apple GPU"},
		{"size", stageSize, w, "no machine of tenant acme in region eu-west is big enough for class apple-gpu (4 CPUs, 16384 MB of memory)"},
		{"driver", stageDriver, w, "no machine of tenant acme in region eu-west offers a driver that runs a notebook with an Apple GPU"},
		{"permit", stagePermit, w, "no machine of tenant acme in region eu-west offers a driver isolated enough to run a notebook with an Apple GPU for a tenant other than its owner"},
		{"online", stageOnline, w, "no machine of tenant acme in region eu-west that could run it is online"},
		{"limit", stageLimit, w, "no machine of tenant acme in region eu-west can run another vz workload (2 per machine)"},
		{"devices", stageDevicesFree, w, "no machine of tenant acme in region eu-west has a free Apple GPU"},
		{"cpus", stageCPUsFree, w, "no machine of tenant acme in region eu-west has 4 free CPUs"},
		{"memory", stageMemoryFree, w, "no machine of tenant acme in region eu-west has 16384 MB of memory free"},
		{"ports", stagePortsFree, w, "no machine of tenant acme in region eu-west has host port 8080/tcp free"},
		{"feature", stageFeature, w, "no machine of tenant acme in region eu-west runs an agent new enough for it (it needs agent features spec; upgrade einsora-agent)"},
		{"sticky_ports", stagePortsFree, s, "waiting for machine m-1, which holds its disk, to have host port 8080/tcp free"},
		{"sticky_feature", stageFeature, s, "waiting for machine m-1, which holds its disk, to run an agent new enough for it (it needs agent features spec; upgrade einsora-agent there)"},
		{"sticky_host", stageHost, s, "machine m-1, which holds its disk, is not tenant acme's machine in region eu-west"},
		{"sticky_accelerator", stageAccelerator, s, "machine m-1, which holds its disk, has no Apple GPU"},
		{"sticky_size", stageSize, s, "machine m-1, which holds its disk, is too small for class apple-gpu (4 CPUs, 16384 MB of memory)"},
		{"sticky_driver", stageDriver, s, "waiting for machine m-1, which holds its disk, to offer driver macos-native"},
		{"sticky_permit", stagePermit, s, "machine m-1, which holds its disk, offers no driver isolated enough to run a notebook with an Apple GPU for a tenant other than its owner"},
		{"sticky_online", stageOnline, s, "waiting for machine m-1, which holds its disk, to come online"},
		{"sticky_limit", stageLimit, s, "waiting for machine m-1, which holds its disk, to run fewer than 2 vz workloads"},
		{"sticky_devices", stageDevicesFree, s, "waiting for machine m-1, which holds its disk, to have a free Apple GPU"},
		{"sticky_cpus", stageCPUsFree, s, "waiting for machine m-1, which holds its disk, to have 4 free CPUs"},
		{"sticky_memory", stageMemoryFree, s, "waiting for machine m-1, which holds its disk, to have 16384 MB of memory free"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := f.reason(tt.stage, vz, &tt.w, &c).Reason; got != tt.want {
				t.Errorf("got\n\t%q\nwant\n\t%q", got, tt.want)
			}
		})
	}
}

func TestPlaceDoesNotChangeMachines(t *testing.T) {
	ms := []Machine{
		with(linux("m-1", "acme", "r", 2), holding(Held{Workload: "x", Driver: "docker", CPUs: 1, Devices: []string{"nvidia:GPU-0"}})),
		mac("m-2", "acme", "r"),
	}
	before := []Machine{
		with(linux("m-1", "acme", "r", 2), holding(Held{Workload: "x", Driver: "docker", CPUs: 1, Devices: []string{"nvidia:GPU-0"}})),
		mac("m-2", "acme", "r"),
	}
	f := NewFleet(ms, DefaultDrivers)
	w := wl("w", "acme", "r", nb, "nvidia-1")
	c := class(t, "nvidia-1")
	if _, err := f.Place(w, c); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ms, before) {
		t.Errorf("machines changed:\ngot  %+v\nwant %+v", ms, before)
	}
}

func TestFleetPass(t *testing.T) {
	ms := []Machine{linux("m-1", "acme", "r", 2), mac("m-2", "acme", "r")}
	f := NewFleet(ms, DefaultDrivers)
	nv := class(t, "nvidia-1")
	var got []string
	for _, id := range []string{"a", "b", "c"} {
		w := wl(id, "acme", "r", nb, "nvidia-1")
		d, err := f.Place(w, nv)
		if err != nil {
			got = append(got, err.Error())
			continue
		}
		got = append(got, d.Machine+" "+d.Devices[0])
	}
	want := []string{"m-1 nvidia:GPU-0", "m-1 nvidia:GPU-1", "no machine of tenant acme in region r has a free NVIDIA GPU"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}

	// Two macOS guests fill vz's limit on the Mac; the third waits.
	c2 := class(t, "cpu-1")
	for _, id := range []string{"v1", "v2"} {
		w := withImage(wl(id, "acme", "r", vm, "cpu-1"), macIPSW)
		d, err := f.Place(w, c2)
		if err != nil || d.Machine != "m-2" || d.Driver != "vz" {
			t.Fatalf("vm %s: got %+v, %v, want m-2 vz", id, d, err)
		}
	}
	_, err := f.Place(withImage(wl("v3", "acme", "r", vm, "cpu-1"), macIPSW), c2)
	if want := "no machine of tenant acme in region r can run another vz workload (2 per machine)"; err == nil || err.Error() != want {
		t.Errorf("third vm: got %v, want %q", err, want)
	}
	// Placing one already held is refused, whatever it asks.
	if _, err := f.Place(wl("a", "acme", "r", ct, "cpu-1"), c2); err == nil || err.Error() != "it is already placed on machine m-1" {
		t.Errorf("placed twice: got %v", err)
	}
}
