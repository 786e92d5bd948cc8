package placement

import (
	"testing"

	"einsora.dev/edge/protocol"
)

func tcp(host int) protocol.Port {
	return protocol.Port{Host: host, Container: 80, Proto: protocol.ProtoTCP}
}
func udp(host int) protocol.Port {
	return protocol.Port{Host: host, Container: 53, Proto: protocol.ProtoUDP}
}

func withPorts(w Workload, ps ...protocol.Port) Workload { w.Ports = ps; return w }

func features(fs ...string) func(*Machine) { return func(m *Machine) { m.Features = fs } }

// TestHostPortsArePlacementConstraints: a host port that a workload holding
// resources publishes on a machine makes the machine not fit for another
// workload publishing it; another protocol or port fits.
func TestHostPortsArePlacementConstraints(t *testing.T) {
	web := wl("w", "acme", "r", ct, "cpu-1")
	held := Held{Workload: "x", Driver: "docker", CPUs: 1, MemoryMB: 1024, Ports: []protocol.Port{tcp(8080)}}
	tests := []struct {
		name     string
		machines []Machine
		w        Workload
		machine  string
		reason   string
	}{
		{"free_port", []Machine{linux("m-1", "acme", "r", 0)}, withPorts(web, tcp(8080)), "m-1", ""},
		{"taken_port", []Machine{with(linux("m-1", "acme", "r", 0), holding(held))}, withPorts(web, tcp(8080)), "",
			"no machine of tenant acme in region r has host port 8080/tcp free"},
		{"taken_port_elsewhere_free", []Machine{with(linux("m-1", "acme", "r", 0), holding(held)), with(linux("m-2", "acme", "r", 0), size(64, 1<<20))},
			withPorts(web, tcp(8080)), "m-2", ""},
		{"same_number_other_protocol", []Machine{with(linux("m-1", "acme", "r", 0), holding(held))}, withPorts(web, udp(8080)), "m-1", ""},
		{"one_of_two_taken", []Machine{with(linux("m-1", "acme", "r", 0), holding(held))}, withPorts(web, tcp(9090), tcp(8080)), "",
			"no machine of tenant acme in region r has host ports 9090/tcp and 8080/tcp free"},
		{"no_ports_fits", []Machine{with(linux("m-1", "acme", "r", 0), holding(held))}, web, "m-1", ""},
		{"sticky_waits", []Machine{with(mac("m-1", "acme", "r"), holding(Held{Workload: "x", Driver: "vz", CPUs: 1, Ports: []protocol.Port{tcp(22)}}))},
			withPorts(sticky(wl("v", "acme", "r", vm, "cpu-1"), "m-1", "vz"), tcp(22)), "",
			"waiting for machine m-1, which holds its disk, to have host port 22/tcp free"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Place(tt.w, class(t, "cpu-1"), tt.machines, DefaultDrivers)
			if tt.reason != "" {
				if err == nil || err.Error() != tt.reason {
					t.Fatalf("got %+v, %v; want %q", d, err, tt.reason)
				}
				return
			}
			if err != nil || d.Machine != tt.machine {
				t.Fatalf("got %+v, %v; want machine %s", d, err, tt.machine)
			}
		})
	}
}

// TestFleetHoldsPortsForTheRestOfThePass: two workloads publishing the same
// host port in one pass land on two machines, and a third waits.
func TestFleetHoldsPortsForTheRestOfThePass(t *testing.T) {
	f := NewFleet([]Machine{linux("m-1", "acme", "r", 0), linux("m-2", "acme", "r", 0)}, DefaultDrivers)
	c := class(t, "cpu-1")
	var got []string
	for _, id := range []string{"a", "b"} {
		d, err := f.Place(withPorts(wl(id, "acme", "r", ct, "cpu-1"), tcp(8080)), c)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Machine)
	}
	if got[0] == got[1] {
		t.Fatalf("both on %s", got[0])
	}
	if _, err := f.Place(withPorts(wl("c", "acme", "r", ct, "cpu-1"), tcp(8080)), c); err == nil {
		t.Fatal("a third workload on port 8080 was placed")
	}
	// The same shape without the port still fits: ports key the shortlist.
	if _, err := f.Place(wl("d", "acme", "r", ct, "cpu-1"), c); err != nil {
		t.Fatalf("without the port: %v", err)
	}
}

// TestOldAgentsGetNoSpec: a workload needing the spec feature is placed
// only where the agent reports it.
func TestOldAgentsGetNoSpec(t *testing.T) {
	w := wl("w", "acme", "r", ct, "cpu-1")
	w.Needs = []string{protocol.FeatureSpec}
	old := linux("m-old", "acme", "r", 0)
	if _, err := Place(w, class(t, "cpu-1"), []Machine{old}, DefaultDrivers); err == nil ||
		err.Error() != "no machine of tenant acme in region r runs an agent new enough for it (it needs agent features spec; upgrade einsora-agent)" {
		t.Fatalf("on an old agent: %v", err)
	}
	d, err := Place(w, class(t, "cpu-1"), []Machine{old, with(linux("m-new", "acme", "r", 0), features(protocol.FeatureSpec))}, DefaultDrivers)
	if err != nil || d.Machine != "m-new" {
		t.Fatalf("got %+v, %v; want m-new", d, err)
	}
	// A workload needing nothing still runs on the old agent.
	if _, err := Place(wl("p", "acme", "r", ct, "cpu-1"), class(t, "cpu-1"), []Machine{old}, DefaultDrivers); err != nil {
		t.Fatal(err)
	}
}
