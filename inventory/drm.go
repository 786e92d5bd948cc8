package inventory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"einsora.dev/edge/protocol"
)

// PCI vendor IDs of the GPUs found through DRM. NVIDIA (0x10de) cards are
// left to probeNVIDIA, and others (a server's ASPEED BMC, virtio-gpu) are
// not accelerators.
const (
	vendorAMD   = "0x1002"
	vendorIntel = "0x8086"
)

var drmCard = regexp.MustCompile(`^card[0-9]+$`)

// probeDRM lists AMD and Intel GPUs from /sys/class/drm/cardN, skipping
// connectors (card0-DP-1) and render nodes.
func probeDRM(_ context.Context, p *Prober) (func(*protocol.Inventory), error) {
	entries, err := os.ReadDir(p.path("/sys/class/drm"))
	if err != nil {
		// No DRM at all: a server without display drivers, or a container.
		return nil, nil
	}
	var gpus []protocol.GPU
	var errs []error
	amd := 0
	for _, e := range entries {
		if !drmCard.MatchString(e.Name()) {
			continue
		}
		dev := filepath.Join(p.path("/sys/class/drm"), e.Name(), "device")
		vendor, err := p.readLine(filepath.Join(dev, "vendor"))
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("read %s vendor: %w", e.Name(), err))
			}
			continue
		}
		var gpu protocol.GPU
		switch vendor {
		case vendorAMD:
			gpu = drmGPU(p, dev, "amd", "AMD GPU")
			amd++
		case vendorIntel:
			gpu = drmGPU(p, dev, "intel", "Intel GPU")
		default:
			continue
		}
		if gpu.ID == "" {
			gpu.ID = strings.TrimPrefix(e.Name(), "card")
		}
		gpus = append(gpus, gpu)
	}
	// ROCm reaches AMD GPUs through the KFD; without /dev/kfd (a kernel
	// without it, or a container not given it) they are display only.
	if amd > 0 && !fileExists(p.path("/dev/kfd")) {
		errs = append(errs, errors.New("no /dev/kfd: AMD GPUs not usable for compute"))
	}
	return appendGPUs(gpus), errors.Join(errs...)
}

// drmGPU reads what sysfs says of one PCI GPU. amdgpu exposes its VRAM,
// a serial (unique_id) and on some boards a product name; i915 and xe
// expose none of these, so Intel GPUs show their PCI device ID.
func drmGPU(p *Prober, dev, vendor, fallbackModel string) protocol.GPU {
	read := func(name string) string {
		s, _ := p.readLine(filepath.Join(dev, name))
		return s
	}
	gpu := protocol.GPU{Vendor: vendor, Model: read("product_name")}
	if gpu.Model == "" {
		gpu.Model = strings.TrimSpace(fallbackModel + " " + read("device"))
	}
	if vram, err := strconv.ParseUint(read("mem_info_vram_total"), 10, 64); err == nil {
		gpu.MemoryMB = int(vram >> 20)
	}
	gpu.ID = read("unique_id")
	if gpu.ID == "" {
		gpu.ID = pciSlot(p, dev)
	}
	return gpu
}

// pciSlot returns the device's PCI address, e.g. "0000:03:00.0", from its
// uevent, or from where its sysfs link points.
func pciSlot(p *Prober, dev string) string {
	data, _ := p.readFile(filepath.Join(dev, "uevent"))
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "PCI_SLOT_NAME="); ok {
			return v
		}
	}
	if target, err := os.Readlink(dev); err == nil {
		return filepath.Base(target)
	}
	return ""
}
