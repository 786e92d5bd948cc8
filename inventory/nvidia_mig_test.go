package inventory

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"einsora.dev/edge/protocol"
)

// TestParseNVIDIAMIG reads nvidia-smi output of GPUs with MIG on, shaped
// like real A100 and H200 captures: each MIG device is its own GPU by its
// MIG UUID, with its profile and memory, and the parent keeps its mode.
func TestParseNVIDIAMIG(t *testing.T) {
	tests := []struct {
		name, xml, list string
		wantErr         []string
	}{
		{"nvidia-smi-2gpu-a100-mig", "nvidia-smi-2gpu-a100-mig.xml", "nvidia-smi-L-2gpu-a100-mig.txt",
			[]string{"GPU-9d4e6f10-22b7-4c3e-8f05-b61a7d0c4e28: MIG mode disabled, enabled after a GPU reset"}},
		// No attached_gpus, no fb_memory_usage on the parent or on one
		// MIG device: nothing to compare, memory unknown, no note.
		{"nvidia-smi-1gpu-h200-mig-trimmed", "nvidia-smi-1gpu-h200-mig-trimmed.xml", "nvidia-smi-L-1gpu-h200-mig.txt", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			xml := readTestdata(t, tt.xml)
			list := readTestdata(t, tt.list)
			gpus, err := parseNVIDIA(xml, list)
			errs := flatten(err)
			if len(errs) != len(tt.wantErr) {
				t.Fatalf("got errors %v, want %d: %q", errs, len(tt.wantErr), tt.wantErr)
			}
			for i, e := range errs {
				if !strings.Contains(e.Error(), tt.wantErr[i]) {
					t.Errorf("error %d: got %q, want it to contain %q", i, e, tt.wantErr[i])
				}
			}
			checkGolden(t, tt.name, gpus)
		})
	}
}

// TestNVIDIAMissingElements: real outputs leave elements out; that is not
// a contradiction worth a note.
func TestNVIDIAMissingElements(t *testing.T) {
	in := `<nvidia_smi_log><gpu id="0"><product_name>NVIDIA L4</product_name><uuid>GPU-1</uuid></gpu></nvidia_smi_log>`
	gpus, err := parseNVIDIASMI([]byte(in))
	if err != nil {
		t.Errorf("got error %v, want none", err)
	}
	if len(gpus) != 1 || gpus[0].MemoryMB != 0 {
		t.Errorf("got %+v, want one GPU of unknown memory", gpus)
	}
}

// TestProbeNVIDIAMIG runs the prober: it asks for the listing because MIG is
// on, and without the listing it offers no MIG device and says why.
func TestProbeNVIDIAMIG(t *testing.T) {
	root := t.TempDir()
	cmds := fakeCommands{
		"nvidia-smi -q -x": "nvidia-smi-2gpu-a100-mig.xml",
		"nvidia-smi -L":    "nvidia-smi-L-2gpu-a100-mig.txt",
	}
	inv := probeGPUs(t, root, cmds)
	var mig, whole int
	for _, g := range inv.GPUs {
		if g.Parent != "" {
			mig++
			if !strings.HasPrefix(g.ID, "MIG-") || g.Profile == "" || g.MemoryMB == 0 {
				t.Errorf("MIG device %+v: want a MIG UUID, profile and memory", g)
			}
		} else {
			whole++
		}
	}
	if mig != 3 || whole != 2 {
		t.Errorf("got %d MIG devices and %d GPUs, want 3 and 2: %+v", mig, whole, inv.GPUs)
	}

	cmds["nvidia-smi -L"] = "!nvidia-smi -L: exit status 9"
	inv = probeGPUs(t, root, cmds)
	for _, g := range inv.GPUs {
		if g.Parent != "" {
			t.Errorf("without the listing got MIG device %+v", g)
		}
	}
	if !strings.Contains(strings.Join(inv.Notes, "|"), "MIG devices not offered") {
		t.Errorf("notes %q: want one saying MIG devices are not offered", inv.Notes)
	}
}

func probeGPUs(t *testing.T, root string, cmds fakeCommands) protocol.Inventory {
	t.Helper()
	p := treeProber(root, cmds)
	p.probers = []prober{{"nvidia", probeNVIDIA}}
	return p.Probe(context.Background())
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}
