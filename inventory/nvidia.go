package inventory

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"einsora.dev/edge/protocol"
)

// probeNVIDIA lists NVIDIA GPUs from nvidia-smi, which alone knows their
// memory; without it, from the driver's /proc files (model and UUID); and
// without those, from the device nodes (count only).
func probeNVIDIA(ctx context.Context, p *Prober) (func(*protocol.Inventory), error) {
	var errs []error
	out, err := p.run(ctx, p.timeout, "nvidia-smi", "-q", "-x")
	if err == nil {
		var gpus []protocol.GPU
		var perr error
		if nvidiaMIGEnabled(out) {
			// The XML names neither a MIG device's UUID nor its profile:
			// only the listing does.
			list, lerr := p.run(ctx, p.timeout, "nvidia-smi", "-L")
			if lerr != nil {
				errs = append(errs, fmt.Errorf("MIG devices not offered: %w", lerr))
				list = nil
			}
			gpus, perr = parseNVIDIA(out, list)
		} else {
			gpus, perr = parseNVIDIA(out, nil)
		}
		if len(gpus) > 0 {
			return appendGPUs(gpus), errors.Join(append(errs, perr)...)
		}
		err = perr
	}
	if err != nil && !errors.Is(err, errAbsent) {
		errs = append(errs, err)
	}

	gpus, err := nvidiaFromProc(p)
	if err != nil {
		errs = append(errs, err)
	}
	unknown := "memory"
	if len(gpus) == 0 {
		gpus, unknown = nvidiaFromDev(p), "model and memory"
	}
	if len(gpus) > 0 && len(errs) == 0 {
		// Say why the GPUs are reported without what nvidia-smi knows.
		errs = append(errs, fmt.Errorf("no nvidia-smi: GPU %s unknown", unknown))
	}
	return appendGPUs(gpus), errors.Join(errs...)
}

func appendGPUs(gpus []protocol.GPU) func(*protocol.Inventory) {
	if len(gpus) == 0 {
		return nil
	}
	return func(inv *protocol.Inventory) { inv.GPUs = append(inv.GPUs, gpus...) }
}

// nvidiaSMILog is the part of `nvidia-smi -q -x` output (nvsmi_device DTD)
// that the inventory uses. Elements real outputs leave out (attached_gpus in
// some container images, fb_memory_usage on some boards) are pointers or
// strings so that missing reads as unknown, not as zero.
type nvidiaSMILog struct {
	XMLName      xml.Name       `xml:"nvidia_smi_log"`
	AttachedGPUs *string        `xml:"attached_gpus"`
	GPUs         []nvidiaSMIGPU `xml:"gpu"`
}

type nvidiaSMIGPU struct {
	BusID        string        `xml:"id,attr"`
	ProductName  string        `xml:"product_name"`
	UUID         string        `xml:"uuid"`
	MinorNumber  string        `xml:"minor_number"`
	FBMemoryUsed *nvidiaMemory `xml:"fb_memory_usage"`
	MIGMode      struct {
		Current string `xml:"current_mig"`
		Pending string `xml:"pending_mig"`
	} `xml:"mig_mode"`
	MIGDevices []struct {
		Index        string        `xml:"index"`
		FBMemoryUsed *nvidiaMemory `xml:"fb_memory_usage"`
	} `xml:"mig_devices>mig_device"`
}

type nvidiaMemory struct {
	Total string `xml:"total"`
}

// nvidiaMIGEnabled reports whether any GPU of `nvidia-smi -q -x` output
// has MIG enabled, so that the probe asks for the listing only then.
func nvidiaMIGEnabled(data []byte) bool {
	var log nvidiaSMILog
	if xml.Unmarshal(data, &log) != nil {
		return false
	}
	for _, g := range log.GPUs {
		if strings.EqualFold(strings.TrimSpace(g.MIGMode.Current), "Enabled") {
			return true
		}
	}
	return false
}

// parseNVIDIASMI reads `nvidia-smi -q -x` output of GPUs without MIG.
func parseNVIDIASMI(data []byte) ([]protocol.GPU, error) { return parseNVIDIA(data, nil) }

// parseNVIDIA reads `nvidia-smi -q -x` output and, for GPUs with MIG
// enabled, the `nvidia-smi -L` listing (nil when not run). Each MIG device
// becomes a GPU of its own, by its MIG UUID; its parent stays listed, with
// its MIG mode, for the hub to check the devices against, and is never
// offered whole. It returns what it could read along with an error about
// the rest.
func parseNVIDIA(data, listing []byte) ([]protocol.GPU, error) {
	var log nvidiaSMILog
	if err := xml.Unmarshal(data, &log); err != nil {
		return nil, fmt.Errorf("parse nvidia-smi output: %w", err)
	}
	var migs map[string][]migListed
	if listing != nil {
		migs = parseNVIDIAListing(listing)
	}
	var errs []error
	gpus := make([]protocol.GPU, 0, len(log.GPUs))
	for i, g := range log.GPUs {
		gpu := protocol.GPU{
			Vendor: "nvidia",
			Model:  strings.TrimSpace(g.ProductName),
			ID:     firstNonEmpty(strings.TrimSpace(g.UUID), strings.TrimSpace(g.MinorNumber), strconv.Itoa(i)),
		}
		if g.FBMemoryUsed != nil {
			mb, err := parseMiB(g.FBMemoryUsed.Total)
			if err != nil {
				errs = append(errs, fmt.Errorf("parse nvidia-smi memory of %s: %w", gpu.ID, err))
			}
			gpu.MemoryMB = mb
		}
		cur := migModeOf(g.MIGMode.Current)
		pend := migModeOf(g.MIGMode.Pending)
		gpu.MIGMode = cur
		if pend != "" && cur != "" && pend != cur {
			// The mode changes at the next reset: neither the whole GPU
			// nor today's MIG devices can be counted on until then.
			gpu.MIGMode = protocol.MIGPending
			errs = append(errs, fmt.Errorf("GPU %s: MIG mode %s, %s after a GPU reset: not offered until then", gpu.ID, cur, pend))
		}
		gpus = append(gpus, gpu)
		if gpu.MIGMode != protocol.MIGEnabled {
			continue
		}
		if listing == nil {
			errs = append(errs, fmt.Errorf("GPU %s: MIG enabled but its devices are not listed", gpu.ID))
			continue
		}
		memory := map[string]int{}
		for _, d := range g.MIGDevices {
			if d.FBMemoryUsed == nil {
				continue
			}
			if mb, err := parseMiB(d.FBMemoryUsed.Total); err == nil {
				memory[strings.TrimSpace(d.Index)] = mb
			}
		}
		listed := migs[gpu.ID]
		if len(listed) == 0 {
			errs = append(errs, fmt.Errorf("GPU %s: MIG enabled with no MIG devices", gpu.ID))
		}
		for _, m := range listed {
			gpus = append(gpus, protocol.GPU{
				Vendor:   "nvidia",
				Model:    gpu.Model,
				ID:       m.uuid,
				MemoryMB: memory[m.index],
				Parent:   gpu.ID,
				Profile:  m.profile,
			})
		}
	}
	// Some nvidia-smi builds (and container images with a trimmed driver)
	// leave attached_gpus out: then there is nothing to compare.
	if log.AttachedGPUs != nil {
		attached, err := strconv.Atoi(strings.TrimSpace(*log.AttachedGPUs))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("parse nvidia-smi attached_gpus %q", truncate(*log.AttachedGPUs, 32)))
		case attached != len(log.GPUs):
			errs = append(errs, fmt.Errorf("nvidia-smi lists %d of %d attached GPUs", len(log.GPUs), attached))
		}
	}
	return gpus, errors.Join(errs...)
}

// migModeOf maps nvidia-smi's "Enabled"/"Disabled" to protocol's modes;
// "N/A" (a GPU without MIG) and anything else is "".
func migModeOf(s string) string {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "enabled":
		return protocol.MIGEnabled
	case "disabled":
		return protocol.MIGDisabled
	}
	return ""
}

// migListed is one MIG device line of `nvidia-smi -L`.
type migListed struct {
	index, profile, uuid string
}

// maxMIGPerGPU bounds what is read of one GPU's listing: a GPU has at most
// seven MIG compute slices.
const maxMIGPerGPU = 7

var (
	nvidiaListGPU = regexp.MustCompile(`^GPU [0-9]+: .*\(UUID: (GPU-[^)\s]+)\)`)
	nvidiaListMIG = regexp.MustCompile(`^\s+MIG ([0-9a-z.+]+)\s+Device\s+([0-9]+): \(UUID: (MIG-[^)\s]+)\)`)
)

// parseNVIDIAListing reads `nvidia-smi -L`, which lists each MIG device
// indented under its GPU:
//
//	GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-...)
//	  MIG 3g.20gb     Device  0: (UUID: MIG-...)
//
// and returns the MIG devices by their GPU's UUID.
func parseNVIDIAListing(data []byte) map[string][]migListed {
	out := map[string][]migListed{}
	parent := ""
	for line := range strings.Lines(string(data)) {
		line = strings.TrimRight(line, "\r\n")
		if m := nvidiaListGPU.FindStringSubmatch(line); m != nil {
			parent = m[1]
			continue
		}
		m := nvidiaListMIG.FindStringSubmatch(line)
		if m == nil || parent == "" || len(out[parent]) >= maxMIGPerGPU {
			continue
		}
		out[parent] = append(out[parent], migListed{index: m[2], profile: m[1], uuid: m[3]})
	}
	return out
}

// parseMiB reads "81559 MiB". "N/A" (a GPU that does not say) is 0 and no
// error.
func parseMiB(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "N/A" {
		return 0, nil
	}
	num, ok := strings.CutSuffix(s, " MiB")
	n, err := strconv.Atoi(num)
	if !ok || err != nil || n < 0 {
		return 0, fmt.Errorf("unexpected %q", s)
	}
	return n, nil
}

// nvidiaFromProc reads the driver's
// /proc/driver/nvidia/gpus/BUS/information files.
func nvidiaFromProc(p *Prober) ([]protocol.GPU, error) {
	paths, _ := filepath.Glob(p.path("/proc/driver/nvidia/gpus/*/information"))
	var gpus []protocol.GPU
	var errs []error
	for _, path := range paths {
		data, err := p.readFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("read nvidia gpu information: %w", err))
			continue
		}
		gpus = append(gpus, parseNVIDIAInformation(data, len(gpus)))
	}
	return gpus, errors.Join(errs...)
}

// parseNVIDIAInformation reads one /proc/driver/nvidia/gpus/*/information,
// lines such as "Model: \t\t NVIDIA H100 80GB HBM3".
func parseNVIDIAInformation(data []byte, index int) protocol.GPU {
	fields := map[string]string{}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return protocol.GPU{
		Vendor: "nvidia",
		Model:  fields["Model"],
		ID:     firstNonEmpty(fields["GPU UUID"], fields["Device Minor"], strconv.Itoa(index)),
	}
}

var nvidiaDevice = regexp.MustCompile(`^nvidia([0-9]+)$`)

// nvidiaFromDev counts /dev/nvidiaN nodes (not nvidiactl or nvidia-uvm),
// which is all a container given GPUs without the driver's /proc may see.
func nvidiaFromDev(p *Prober) []protocol.GPU {
	entries, _ := os.ReadDir(p.path("/dev"))
	var gpus []protocol.GPU
	for _, e := range entries {
		if m := nvidiaDevice.FindStringSubmatch(e.Name()); m != nil {
			gpus = append(gpus, protocol.GPU{Vendor: "nvidia", ID: m[1]})
		}
	}
	return gpus
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
