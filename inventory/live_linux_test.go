package inventory

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestProbeLive probes this machine and checks what can be checked from
// here: the CPUs agree with runtime.NumCPU and the cgroup quota, the memory
// with /proc/meminfo and the cgroup limit, the kernel with uname(2).
func TestProbeLive(t *testing.T) {
	p := New(Options{})
	start := time.Now()
	inv := p.Probe(context.Background())
	took := time.Since(start)
	out, _ := json.MarshalIndent(inv, "", "  ")
	t.Logf("probe took %v:\n%s", took, out)

	if inv.OS != runtime.GOOS || inv.Arch != runtime.GOARCH {
		t.Errorf("got %s/%s, want %s/%s", inv.OS, inv.Arch, runtime.GOOS, runtime.GOARCH)
	}

	wantCPUs := runtime.NumCPU()
	if limit, _ := cgroupCPULimit(p); limit > 0 && limit < wantCPUs {
		wantCPUs = limit
	}
	if inv.CPUs != wantCPUs {
		t.Errorf("got %d CPUs, want %d", inv.CPUs, wantCPUs)
	}

	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Skipf("no /proc/meminfo: %v", err)
	}
	total, err := parseMemTotal(data)
	if err != nil {
		t.Fatal(err)
	}
	if limit, _ := cgroupMemoryLimit(p); limit > 0 && limit < total {
		total = limit
	}
	if want := int(total >> 20); inv.MemoryMB != want {
		t.Errorf("got %d MB, want %d", inv.MemoryMB, want)
	}

	var uts syscall.Utsname
	if err := syscall.Uname(&uts); err == nil {
		var release []byte
		for _, c := range uts.Release {
			if c == 0 {
				break
			}
			release = append(release, byte(c))
		}
		if inv.Kernel != string(release) {
			t.Errorf("got kernel %q, want %q", inv.Kernel, release)
		}
	}
	if host, err := os.Hostname(); err == nil && inv.Hostname != host {
		t.Errorf("got hostname %q, want %q", inv.Hostname, host)
	}
	if _, err := os.Stat("/dev/kvm"); (err == nil) != inv.Virtualization {
		t.Errorf("got virtualization %v, want %v", inv.Virtualization, err == nil)
	}
}

// BenchmarkProbe measures a full probe of this machine.
func BenchmarkProbe(b *testing.B) {
	p := New(Options{})
	ctx := context.Background()
	for b.Loop() {
		p.Probe(ctx)
	}
}

// BenchmarkProber measures each prober alone, to see where a probe's time
// goes.
func BenchmarkProber(b *testing.B) {
	p := New(Options{})
	ctx := context.Background()
	for _, pr := range p.probers {
		b.Run(pr.name, func(b *testing.B) {
			for b.Loop() {
				pr.probe(ctx, p)
			}
		})
	}
}
