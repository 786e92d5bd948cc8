package inventory

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"einsora.dev/edge/protocol"
)

// TestParseFixtures parses nvidia-smi, system_profiler and ioreg output and
// compares the GPUs with testdata/<fixture>.golden.
func TestParseFixtures(t *testing.T) {
	parsers := map[string]func([]byte) ([]protocol.GPU, error){
		"nvidia-smi":               parseNVIDIASMI,
		"system-profiler-displays": parseSystemProfilerDisplays,
		"ioreg-agx":                parseIORegAGX,
	}
	tests := []struct {
		name   string
		file   string
		parser string
	}{
		{"nvidia_1gpu_rtx4090", "nvidia-smi-1gpu-rtx4090.xml", "nvidia-smi"},
		{"nvidia_8gpu_h100", "nvidia-smi-8gpu-h100.xml", "nvidia-smi"},
		{"system_profiler_m1", "system-profiler-displays-m1.json", "system-profiler-displays"},
		{"system_profiler_m2_pro", "system-profiler-displays-m2-pro.json", "system-profiler-displays"},
		{"system_profiler_m3_max", "system-profiler-displays-m3-max.json", "system-profiler-displays"},
		{"system_profiler_m4_headless", "system-profiler-displays-m4-headless.json", "system-profiler-displays"},
		{"system_profiler_intel_mac_radeon", "system-profiler-displays-intel-mac-radeon.json", "system-profiler-displays"},
		{"ioreg_m1", "ioreg-agx-m1.txt", "ioreg-agx"},
		{"ioreg_m2_pro", "ioreg-agx-m2-pro.txt", "ioreg-agx"},
		{"ioreg_m3_max", "ioreg-agx-m3-max.txt", "ioreg-agx"},
		{"ioreg_m4", "ioreg-agx-m4.txt", "ioreg-agx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			gpus, err := parsers[tt.parser](data)
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			checkGolden(t, strings.TrimSuffix(tt.file, filepath.Ext(tt.file)), gpus)
		})
	}
}

// TestParseBadOutput feeds the parsers output they must not trust: they
// return an error, and what they could read, without panicking.
func TestParseBadOutput(t *testing.T) {
	tests := []struct {
		name     string
		parse    func([]byte) ([]protocol.GPU, error)
		in       string
		wantGPUs int
		wantErr  string
	}{
		{"nvidia_smi_not_xml", parseNVIDIASMI, "NVIDIA-SMI has failed", 0, "parse nvidia-smi output"},
		{"nvidia_smi_wrong_root", parseNVIDIASMI, "<other/>", 0, "parse nvidia-smi output"},
		{"nvidia_smi_memory_garbled", parseNVIDIASMI,
			`<nvidia_smi_log><attached_gpus>1</attached_gpus><gpu id="0"><uuid>GPU-1</uuid><fb_memory_usage><total>lots</total></fb_memory_usage></gpu></nvidia_smi_log>`,
			1, "memory of GPU-1"},
		{"nvidia_smi_fewer_than_attached", parseNVIDIASMI,
			`<nvidia_smi_log><attached_gpus>2</attached_gpus><gpu id="0"><uuid>GPU-1</uuid></gpu></nvidia_smi_log>`,
			1, "lists 1 of 2"},
		{"nvidia_smi_memory_na", parseNVIDIASMI,
			`<nvidia_smi_log><attached_gpus>1</attached_gpus><gpu id="0"><uuid>GPU-1</uuid><fb_memory_usage><total>N/A</total></fb_memory_usage></gpu></nvidia_smi_log>`,
			1, ""},
		{"system_profiler_not_json", parseSystemProfilerDisplays, "{", 0, "parse system_profiler output"},
		{"system_profiler_cores_garbled", parseSystemProfilerDisplays,
			`{"SPDisplaysDataType":[{"_name":"Apple M1","spdisplays_vendor":"sppci_vendor_Apple","sppci_cores":"eight"}]}`,
			1, "GPU cores"},
		{"system_profiler_unknown_vendor", parseSystemProfilerDisplays,
			`{"SPDisplaysDataType":[{"_name":"Mystery","spdisplays_vendor":"sppci_vendor_mystery"}]}`,
			0, "unknown GPU vendor"},
		{"system_profiler_vram_garbled", parseSystemProfilerDisplays,
			`{"SPDisplaysDataType":[{"_name":"AMD","spdisplays_vendor":"sppci_vendor_amd","spdisplays_vram":"4 TB"}]}`,
			1, "size"},
		{"ioreg_cores_garbled", parseIORegAGX, "+-o AGXAcceleratorG13G  <class AGXAcceleratorG13G>\n  {\n  \"gpu-core-count\" = many\n  }\n", 0, "gpu-core-count"},
		{"ioreg_empty", parseIORegAGX, "", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gpus, err := tt.parse([]byte(tt.in))
			if len(gpus) != tt.wantGPUs {
				t.Errorf("got %d GPUs, want %d", len(gpus), tt.wantGPUs)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// FuzzParsers feeds command output the agent cannot trust (a wrapper
// script, a broken driver) to every parser: none may panic, and what they
// return is well formed.
func FuzzParsers(f *testing.F) {
	for _, name := range []string{
		"nvidia-smi-1gpu-rtx4090.xml", "system-profiler-displays-m3-max.json",
		"nvidia-smi-2gpu-a100-mig.xml", "nvidia-smi-L-2gpu-a100-mig.txt",
		"docker-version-podman-5.json", "docker-version-desktop-master.json",
		"system-profiler-displays-intel-mac-radeon.json", "ioreg-agx-m2-pro.txt",
	} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, parse := range []func([]byte) ([]protocol.GPU, error){parseNVIDIASMI, parseSystemProfilerDisplays, parseIORegAGX} {
			gpus, _ := parse(data)
			for _, g := range gpus {
				if g.Vendor == "" || g.MemoryMB < 0 || g.Cores < 0 {
					t.Fatalf("got GPU %+v, want a vendor and no negative counts", g)
				}
			}
		}
		// The same bytes as XML and as the listing, each half as each.
		half := len(data) / 2
		for _, g := range append(must(parseNVIDIA(data, data)), must(parseNVIDIA(data[:half], data[half:]))...) {
			if g.Parent != "" && (g.ID == "" || g.MIGMode != "") {
				t.Fatalf("got MIG device %+v, want an ID and no MIG mode", g)
			}
		}
		parseNVIDIAListing(data)
		var v engineVersion
		if json.Unmarshal(data, &v) == nil {
			if d := v.docker(); d.Kind == "" || len(d.Version) > 64 {
				t.Fatalf("got engine %+v, want a kind and a bounded version", d)
			}
		}
		newRedactor(newCaptureRecorder(), protocol.Inventory{Hostname: string(data[:min(len(data), 8)])}, nil).redact(data)
		parseNVIDIAInformation(data, 0)
		parseOSRelease(data)
		parseCPUModel(data)
		parseMemTotal(data)
		countCPUList(string(data))
	})
}

func must[T any](v T, _ error) T { return v }
