package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"einsora.dev/edge/protocol"
)

// sysctler reads sysctl values by name. probe_darwin.go reads the kernel's;
// tests give a map. A name the kernel does not have gives an error
// matching fs.ErrNotExist (ENOENT does).
type sysctler interface {
	String(name string) (string, error)
	// Uint reads a 4- or 8-byte integer.
	Uint(name string) (uint64, error)
}

// Absolute paths: a launchd daemon's PATH may lack /usr/sbin.
const (
	systemProfilerPath = "/usr/sbin/system_profiler"
	ioregPath          = "/usr/sbin/ioreg"
	swVersPath         = "/usr/bin/sw_vers"
)

// darwinProbers are the probers of a Mac, in the order their results are
// applied.
func darwinProbers(sys sysctler) []prober {
	return []prober{
		{"host", func(ctx context.Context, p *Prober) (func(*protocol.Inventory), error) {
			return probeDarwinHost(ctx, p, sys)
		}},
		{"cpu", func(_ context.Context, p *Prober) (func(*protocol.Inventory), error) {
			return probeDarwinCPU(p, sys)
		}},
		{"memory", func(_ context.Context, _ *Prober) (func(*protocol.Inventory), error) {
			mem, err := sys.Uint("hw.memsize")
			if err != nil {
				return nil, fmt.Errorf("read hw.memsize: %w", err)
			}
			return func(inv *protocol.Inventory) { inv.MemoryMB = int(mem >> 20) }, nil
		}},
		{"gpu", func(ctx context.Context, p *Prober) (func(*protocol.Inventory), error) {
			return probeAppleGPU(ctx, p, sys)
		}},
	}
}

// sysctlFlag reads a 0/1 sysctl; one the kernel lacks (hw.optional.arm64
// on an Intel Mac) is false and no error.
func sysctlFlag(sys sysctler, name string) (bool, error) {
	v, err := sys.Uint(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", name, err)
	}
	return v == 1, nil
}

func probeDarwinHost(ctx context.Context, p *Prober, sys sysctler) (func(*protocol.Inventory), error) {
	var errs []error
	str := func(name string) string {
		s, err := sys.String(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", name, err))
		}
		return strings.TrimSpace(s)
	}
	chip := str("machdep.cpu.brand_string")
	kernel := str("kern.osrelease")
	hostname := str("kern.hostname")

	// kern.osproductversion is there since macOS 10.13.4 and costs no
	// process; sw_vers covers the rest.
	version, err := sys.String("kern.osproductversion")
	if err != nil || strings.TrimSpace(version) == "" {
		out, rerr := p.run(ctx, p.timeout, swVersPath, "-productVersion")
		if rerr != nil {
			errs = append(errs, fmt.Errorf("read macOS version: %w", rerr))
		}
		version = string(out)
	}
	if version = strings.TrimSpace(version); version != "" {
		version = "macOS " + version
	}
	arm64, err := sysctlFlag(sys, "hw.optional.arm64")
	if err != nil {
		errs = append(errs, err)
	}
	hv, err := sysctlFlag(sys, "kern.hv_support")
	if err != nil {
		errs = append(errs, err)
	}
	return func(inv *protocol.Inventory) {
		inv.CPUModel = chip
		inv.Kernel = kernel
		inv.Hostname = hostname
		inv.OSVersion = version
		// hw.optional.arm64 is 1 on an Apple chip even for an amd64 agent
		// under Rosetta, which is what makes it the test.
		inv.AppleSilicon = arm64
		inv.Virtualization = hv
	}, errors.Join(errs...)
}

func probeDarwinCPU(p *Prober, sys sysctler) (func(*protocol.Inventory), error) {
	var errs []error
	n, err := sys.Uint("hw.logicalcpu")
	if err != nil {
		if p.numCPU == nil {
			errs = append(errs, fmt.Errorf("read hw.logicalcpu: %w", err))
		} else {
			n = uint64(p.numCPU())
		}
	}
	perf, eff, err := appleCoreLevels(sys)
	if err != nil {
		errs = append(errs, err)
	}
	return func(inv *protocol.Inventory) {
		inv.CPUs = int(n)
		inv.PerformanceCores = perf
		inv.EfficiencyCores = eff
	}, errors.Join(errs...)
}

// maxPerfLevels bounds the levels read: hw.nperflevels is the kernel's,
// but a wild value must not loop for long.
const maxPerfLevels = 8

// appleCoreLevels counts an Apple chip's cores by the name of each
// performance level (hw.perflevelN.name): "Efficiency" cores are efficiency
// cores and every other level ("Performance", and the "Super" of M5 Pro and
// Max, whose second level is "Performance") counts as performance. Level 0
// is not always the only performance level, nor level 1 the efficiency one.
// Without names (before macOS 12) level 0 is performance and the rest
// efficiency, as on M1 to M4. Intel Macs have no levels: 0, 0.
func appleCoreLevels(sys sysctler) (perf, eff int, err error) {
	var errs []error
	levels := 2
	if v, err := sys.Uint("hw.nperflevels"); err == nil && v > 0 {
		levels = int(min(v, maxPerfLevels))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("read hw.nperflevels: %w", err))
	}
	for i := range levels {
		key := fmt.Sprintf("hw.perflevel%d.physicalcpu", i)
		v, err := sys.Uint(key)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("read %s: %w", key, err))
			}
			continue
		}
		nameKey := fmt.Sprintf("hw.perflevel%d.name", i)
		name, err := sys.String(nameKey)
		name = strings.TrimSpace(strings.TrimRight(name, "\x00"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("read %s: %w", nameKey, err))
		}
		switch {
		case name != "" && strings.EqualFold(name, "Efficiency"):
			eff += int(v)
		case name != "":
			perf += int(v)
		case i == 0:
			perf += int(v)
		default:
			eff += int(v)
		}
	}
	return perf, eff, errors.Join(errs...)
}

// probeAppleGPU lists the Mac's GPUs from system_profiler, and falls back
// to the AGX accelerator in the I/O Registry for the Apple GPU's cores.
func probeAppleGPU(ctx context.Context, p *Prober, sys sysctler) (func(*protocol.Inventory), error) {
	var errs []error
	var gpus []protocol.GPU
	out, err := p.run(ctx, p.timeout, systemProfilerPath, "SPDisplaysDataType", "-json")
	if err == nil {
		gpus, err = parseSystemProfilerDisplays(out)
	}
	if err != nil && !errors.Is(err, errAbsent) {
		errs = append(errs, err)
	}

	apple := -1
	for i, g := range gpus {
		if g.Vendor == "apple" {
			apple = i
		}
	}
	brand, _ := sys.String("machdep.cpu.brand_string")
	if len(gpus) == 0 && strings.HasSuffix(strings.TrimSpace(brand), "(Virtual)") {
		// A macOS guest (GitHub-hosted runner, Tart, UTM) has no GPU to
		// find: say what it is rather than what ioreg lacks.
		return nil, errors.Join(append(errs, errors.New("virtual machine: no GPU"))...)
	}
	if apple < 0 || gpus[apple].Cores == 0 {
		if arm64, _ := sysctlFlag(sys, "hw.optional.arm64"); arm64 {
			out, err := p.run(ctx, p.timeout, ioregPath, "-rc", "AGXAccelerator")
			var agx []protocol.GPU
			if err == nil {
				agx, err = parseIORegAGX(out)
			}
			switch {
			case err != nil:
				errs = append(errs, err)
			case len(agx) == 0:
				errs = append(errs, errors.New("ioreg: no AGXAccelerator"))
			case apple < 0:
				gpus = append(gpus, agx[0])
				apple = len(gpus) - 1
			default:
				gpus[apple].Cores = agx[0].Cores
			}
		}
	}
	if apple >= 0 && gpus[apple].Model == "" {
		// The GPU is part of the chip and takes its name.
		gpus[apple].Model, _ = sys.String("machdep.cpu.brand_string")
	}
	if apple >= 0 && p.goarch != "arm64" {
		// The hub accepts an Apple GPU only from an arm64 agent; saying why
		// it is missing beats having the whole inventory refused.
		gpus = append(gpus[:apple], gpus[apple+1:]...)
		errs = append(errs, fmt.Errorf("apple GPU not reported: agent is %s under Rosetta, not arm64", p.goarch))
	}
	return appendGPUs(gpus), errors.Join(errs...)
}

// spDisplays is the part of `system_profiler SPDisplaysDataType -json` the
// inventory uses. Values are strings, the core count included.
type spDisplays struct {
	Items []struct {
		Name   string `json:"_name"`
		Model  string `json:"sppci_model"`
		Vendor string `json:"spdisplays_vendor"`
		Cores  string `json:"sppci_cores"`
		// Dedicated VRAM of an Intel Mac's discrete GPU, "4 GB"; an
		// Apple GPU shares the machine's memory and has none.
		VRAM string `json:"spdisplays_vram"`
	} `json:"SPDisplaysDataType"`
}

// parseSystemProfilerDisplays reads `system_profiler SPDisplaysDataType
// -json`, returning one GPU per entry of a known vendor. Apple GPUs are
// "0", others numbered in the order listed.
func parseSystemProfilerDisplays(data []byte) ([]protocol.GPU, error) {
	var sp spDisplays
	if err := json.Unmarshal(data, &sp); err != nil {
		return nil, fmt.Errorf("parse system_profiler output: %w", err)
	}
	var gpus []protocol.GPU
	var errs []error
	for i, it := range sp.Items {
		vendor := macGPUVendor(it.Vendor, it.Model+" "+it.Name)
		if vendor == "" {
			errs = append(errs, fmt.Errorf("system_profiler: unknown GPU vendor %q", truncate(it.Vendor, 64)))
			continue
		}
		gpu := protocol.GPU{Vendor: vendor, Model: firstNonEmpty(it.Model, it.Name), ID: strconv.Itoa(i)}
		if vendor == "apple" {
			gpu.ID = "0"
		}
		if it.Cores != "" {
			n, err := strconv.Atoi(strings.TrimSpace(it.Cores))
			if err != nil || n < 0 {
				errs = append(errs, fmt.Errorf("system_profiler: GPU cores %q", truncate(it.Cores, 32)))
			}
			gpu.Cores = max(n, 0)
		}
		if it.VRAM != "" {
			mb, err := parseSize(it.VRAM)
			if err != nil {
				errs = append(errs, fmt.Errorf("system_profiler: %w", err))
			}
			gpu.MemoryMB = mb
		}
		gpus = append(gpus, gpu)
	}
	return gpus, errors.Join(errs...)
}

// macGPUVendor maps system_profiler's vendor ("sppci_vendor_Apple",
// "sppci_vendor_amd", or on older systems "ATI (0x1002)") to ours.
func macGPUVendor(vendor, model string) string {
	v := strings.ToLower(vendor)
	switch {
	case strings.Contains(v, "apple"):
		return "apple"
	case strings.Contains(v, "amd"), strings.HasPrefix(v, "ati"), strings.Contains(v, "0x1002"):
		return "amd"
	case strings.Contains(v, "intel"), strings.Contains(v, "0x8086"):
		return "intel"
	case strings.Contains(v, "nvidia"), strings.Contains(v, "0x10de"):
		return "nvidia"
	case v == "" && strings.HasPrefix(strings.TrimSpace(model), "Apple M"):
		return "apple"
	}
	return ""
}

// parseSize reads system_profiler sizes: "1536 MB", "4 GB".
func parseSize(s string) (int, error) {
	num, unit, _ := strings.Cut(strings.TrimSpace(s), " ")
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q", truncate(s, 32))
	}
	switch unit {
	case "MB":
		return n, nil
	case "GB":
		return n << 10, nil
	}
	return 0, fmt.Errorf("size %q", truncate(s, 32))
}

// parseIORegAGX reads `ioreg -rc AGXAccelerator`: one object per
// accelerator, "+-o AGXAcceleratorG13X  <class ...>", followed by its
// properties as `"key" = value` lines. Children (user clients) carry none.
func parseIORegAGX(data []byte) ([]protocol.GPU, error) {
	var gpus []protocol.GPU
	cur := -1
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(strings.TrimLeft(line, " |"))
		if name, ok := strings.CutPrefix(line, "+-o "); ok {
			cur = -1
			if strings.HasPrefix(name, "AGXAccelerator") {
				gpus = append(gpus, protocol.GPU{Vendor: "apple", ID: "0"})
				cur = len(gpus) - 1
			}
			continue
		}
		if cur < 0 {
			continue
		}
		key, val, ok := strings.Cut(line, " = ")
		if !ok {
			continue
		}
		switch strings.Trim(key, `"`) {
		case "gpu-core-count":
			n, err := strconv.Atoi(strings.TrimSpace(val))
			if err != nil || n < 0 {
				return nil, fmt.Errorf("parse ioreg gpu-core-count %q", truncate(val, 32))
			}
			gpus[cur].Cores = n
		case "model":
			gpus[cur].Model = strings.Trim(strings.TrimSpace(val), `"`)
		}
	}
	return gpus, nil
}
