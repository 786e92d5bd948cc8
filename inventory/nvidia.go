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
		gpus, perr := parseNVIDIASMI(out)
		if len(gpus) > 0 {
			return appendGPUs(gpus), perr
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
// that the inventory uses.
type nvidiaSMILog struct {
	XMLName      xml.Name `xml:"nvidia_smi_log"`
	AttachedGPUs int      `xml:"attached_gpus"`
	GPUs         []struct {
		BusID        string `xml:"id,attr"`
		ProductName  string `xml:"product_name"`
		UUID         string `xml:"uuid"`
		MinorNumber  string `xml:"minor_number"`
		FBMemoryUsed struct {
			Total string `xml:"total"`
		} `xml:"fb_memory_usage"`
	} `xml:"gpu"`
}

// parseNVIDIASMI reads `nvidia-smi -q -x` output. It returns what it could
// read along with an error about the rest.
func parseNVIDIASMI(data []byte) ([]protocol.GPU, error) {
	var log nvidiaSMILog
	if err := xml.Unmarshal(data, &log); err != nil {
		return nil, fmt.Errorf("parse nvidia-smi output: %w", err)
	}
	var errs []error
	gpus := make([]protocol.GPU, 0, len(log.GPUs))
	for i, g := range log.GPUs {
		gpu := protocol.GPU{
			Vendor: "nvidia",
			Model:  strings.TrimSpace(g.ProductName),
			ID:     firstNonEmpty(strings.TrimSpace(g.UUID), strings.TrimSpace(g.MinorNumber), strconv.Itoa(i)),
		}
		mb, err := parseMiB(g.FBMemoryUsed.Total)
		if err != nil {
			errs = append(errs, fmt.Errorf("parse nvidia-smi memory of %s: %w", gpu.ID, err))
		}
		gpu.MemoryMB = mb
		gpus = append(gpus, gpu)
	}
	if log.AttachedGPUs != len(gpus) {
		errs = append(errs, fmt.Errorf("nvidia-smi lists %d of %d attached GPUs", len(gpus), log.AttachedGPUs))
	}
	return gpus, errors.Join(errs...)
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
		data, err := os.ReadFile(path)
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
