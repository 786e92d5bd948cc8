package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"einsora.dev/edge/protocol"
)

// benchFleet makes n machines and q queued workloads for tenants tenants in
// regions regions: Apple Silicon Macs and Linux boxes with 0, 1 or 8 NVIDIA
// GPUs, some already holding workloads, some offline; workloads of every
// kind and class, a tenth of them sticky.
func benchFleet(n, q, tenants, regions int) ([]Machine, []Workload, map[string]Class) {
	rng := rand.New(rand.NewPCG(7, 11))
	classByName := map[string]Class{}
	for _, c := range DefaultClasses {
		classByName[c.Name] = c
	}
	scope := func() (string, string) {
		return fmt.Sprintf("tenant-%02d", rng.IntN(tenants)), fmt.Sprintf("region-%d", rng.IntN(regions))
	}
	ms := make([]Machine, 0, n)
	for i := range n {
		owner, region := scope()
		var m Machine
		switch r := i % 20; {
		case r < 6: // 30% Macs
			m = mac("", owner, region)
			m.CPUs = 8 + 2*rng.IntN(9)
			m.MemoryMB = 16384 << rng.IntN(4)
		case r < 15: // 45% Linux without a GPU
			m = linux("", owner, region, 0)
		case r < 19: // 20% with one GPU
			m = linux("", owner, region, 1)
		default: // 5% with eight
			m = linux("", owner, region, 8)
		}
		if m.OS == "linux" {
			m.CPUs = 8 << rng.IntN(4)
			m.MemoryMB = 16384 << rng.IntN(4)
		}
		m.ID = fmt.Sprintf("m-%05d", i)
		m.Owner, m.Region = owner, region
		m.Online = rng.IntN(20) > 0
		if rng.IntN(2) == 0 {
			m.Holding = []Held{{Workload: fmt.Sprintf("old-%05d", i), Driver: m.Drivers[0], Kind: protocol.KindNotebook, CPUs: 2, MemoryMB: 4096}}
		}
		ms = append(ms, m)
	}
	type shape struct {
		kind  protocol.Kind
		class string
	}
	shapes := []shape{
		{protocol.KindContainer, "cpu-1"}, {protocol.KindContainer, "cpu-2"}, {protocol.KindContainer, "cpu-4"},
		{protocol.KindContainer, "cpu-1"}, {protocol.KindEndpoint, "cpu-2"},
		{protocol.KindNotebook, "nvidia-1"}, {protocol.KindNotebook, "apple-gpu"}, {protocol.KindNotebook, "cpu-2"},
		{protocol.KindVM, "cpu-2"}, {protocol.KindVM, "cpu-4"},
	}
	ws := make([]Workload, 0, q)
	for i := range q {
		tenant, region := scope()
		s := shapes[rng.IntN(len(shapes))]
		w := Workload{ID: fmt.Sprintf("w-%06d", i), Tenant: tenant, Region: region, Kind: s.kind, Class: s.class}
		if i%10 == 0 {
			m := ms[rng.IntN(len(ms))]
			w.Tenant, w.Region, w.HeldMachine = m.Owner, m.Region, m.ID
		}
		ws = append(ws, w)
	}
	return ms, ws, classByName
}

// BenchmarkAdmitPass is one admit pass: a Fleet of 1,000 machines and 10,000
// queued workloads, each placed in turn (Fleet.Place holds what it takes).
func BenchmarkAdmitPass(b *testing.B) {
	for _, bc := range []struct {
		name             string
		tenants, regions int
	}{
		{"mixed_20_tenants_3_regions", 20, 3},
		{"one_tenant_one_region", 1, 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ms, ws, classes := benchFleet(1000, 10000, bc.tenants, bc.regions)
			placed := 0
			for b.Loop() {
				f := NewFleet(ms, DefaultDrivers)
				placed = 0
				for _, w := range ws {
					c := classes[w.Class]
					if _, err := f.Place(w, c); err == nil {
						placed++
					}
				}
			}
			b.ReportMetric(float64(placed), "placed/op")
			b.ReportMetric(float64(len(ws))*float64(b.N)/b.Elapsed().Seconds(), "workloads/s")
			b.ReportMetric(float64(placed)*float64(b.N)/b.Elapsed().Seconds(), "placements/s")
		})
	}
}

// BenchmarkChangeInABusyFleet is the placement side of one change in a
// kept Fleet of 10,000 two-CPU machines, 9,000 of them full: place a
// workload, commit it (Update), end the pass, and let it go again, as a
// controller's passes do one change at a time.
func BenchmarkChangeInABusyFleet(b *testing.B) {
	const n, full = 10000, 9000
	ms := make([]Machine, n)
	for i := range ms {
		m := linux(fmt.Sprintf("m-%05d", i), "acme", "eu", 0)
		m.CPUs = 2
		if i < full {
			m.Holding = []Held{{Workload: fmt.Sprintf("old-%05d", i), Driver: "docker", Kind: protocol.KindContainer, CPUs: 2, MemoryMB: 1024}}
		}
		ms[i] = m
	}
	c := class(b, "cpu-1")
	f := NewFleet(ms, DefaultDrivers)
	byID := map[string]int{}
	for i := range ms {
		byID[ms[i].ID] = i
	}
	k := 0
	for b.Loop() {
		id := fmt.Sprintf("w-%d", k)
		k++
		d, err := f.Place(wl(id, "acme", "eu", protocol.KindContainer, c.Name), c)
		if err != nil {
			b.Fatal(err)
		}
		m := &ms[byID[d.Machine]]
		m.Holding = append(m.Holding, Held{Workload: id, Driver: d.Driver, Kind: protocol.KindContainer, CPUs: c.CPUs, MemoryMB: c.MemoryMB})
		f.NewPass()
		f.Update(*m)
		m.Holding = m.Holding[:len(m.Holding)-1]
		f.Update(*m)
	}
}
