package inventory

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"einsora.dev/edge/protocol"
)

// TestCapture captures the probe of a Linux tree with MIG GPUs, AMD GPUs
// and a Docker engine: every raw output the probes read is written, and
// nothing in the capture names the machine.
func TestCapture(t *testing.T) {
	// The tree of a box with AMD GPUs; nvidia-smi answers as for two A100s.
	root := filepath.Join("testdata", "linux-2gpu-amd")
	p := treeProber(root, fakeCommands{
		"nvidia-smi -q -x": "nvidia-smi-2gpu-a100-mig.xml",
		"nvidia-smi -L":    "nvidia-smi-L-2gpu-a100-mig.txt",
	})
	p.docker = parseDockerHost("unix://"+serveDocker(t, "docker-version.json", "docker-info-runtimes-nvidia-runsc.json"), root)
	dir := filepath.Join(t.TempDir(), "capture")
	inv, err := p.Capture(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) == 0 || inv.Docker == nil {
		t.Fatalf("capture's inventory: %+v, want GPUs and Docker", inv)
	}

	for _, want := range []string{
		"files/proc/cpuinfo", "files/proc/meminfo", "files/etc/os-release", "files/proc/sys/kernel/hostname",
		"files/sys/class/drm/card1/device/vendor", "commands/nvidia-smi -q -x", "commands/nvidia-smi -L",
		"docker/version", "docker/info", "inventory.json", "MANIFEST.txt",
	} {
		if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
			t.Errorf("capture lacks %s: %v", want, err)
		}
	}

	// What identifies the machine, as the fixtures have it.
	secrets := []string{
		strings.TrimSpace(string(readTestdata(t, "linux-2gpu-amd/proc/sys/kernel/hostname"))),
		"gpu-node-07",                          // Docker /info Name
		"1560120047712",                        // nvidia-smi <serial>
		"3b1c07a2-5e4f-4d8a-9c61-0a7e2f55d913", // GPU UUID
		"6f0a3c2e-81d4-5b7a-a3e9-2c4d1f8b0e71", // MIG UUID
		"6f1b8c39-2f4e-4a8e-9c1d-0b5d3c7a9e21", // Docker engine ID
		strings.TrimSpace(string(readTestdata(t, "linux-2gpu-amd/sys/class/drm/card1/device/unique_id"))),
	}
	all := ""
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		all += string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("capture still holds %q", s)
		}
	}
	// The same UUID gets the same stand-in: the listing still puts the
	// MIG devices under the GPU the XML names.
	xml, _ := os.ReadFile(filepath.Join(dir, "commands/nvidia-smi -q -x"))
	list, _ := os.ReadFile(filepath.Join(dir, "commands/nvidia-smi -L"))
	if !strings.Contains(string(xml), "<uuid>GPU-00000000-0000-4000-8000-") {
		t.Errorf("XML UUID not replaced by a stand-in:\n%.400s", xml)
	}
	parent := strings.Fields(strings.Split(string(list), "UUID: ")[1])[0]
	if !strings.Contains(string(xml), strings.TrimSuffix(parent, ")")) {
		t.Errorf("listing's GPU %s is not the XML's", parent)
	}
	if !strings.Contains(string(xml), "<serial>REDACTED</serial>") {
		t.Error("nvidia-smi serial not redacted")
	}
}

// TestRedactSerials covers the serial numbers of sources the Linux tree
// does not have: a Raspberry Pi's cpuinfo, ioreg and system_profiler.
func TestRedactSerials(t *testing.T) {
	r := newRedactor(newCaptureRecorder(), protocol.Inventory{Hostname: "build-mac.local"}, func() string { return "vm" })
	in := "Serial\t\t: 100000002a7f3c91\n" +
		"flags\t: fpu vme de pse\nvm\n" + `"Name":"vm"` + "\n" +
		`"IOPlatformSerialNumber" = "C02XK1ABJGH5"` + "\n" +
		`"serial_number" : "HX7Q9KQ2LD"` + "\n" +
		"build-mac.local and build-mac\n"
	out := string(r.redact([]byte(in)))
	for _, s := range []string{"100000002a7f3c91", "C02XK1ABJGH5", "HX7Q9KQ2LD", "build-mac", "\nvm\n", `"vm"`} {
		if strings.Contains(out, s) {
			t.Errorf("redacted text still holds %q:\n%s", s, out)
		}
	}
	// A short hostname is taken only as a whole word.
	if !strings.Contains(out, "fpu vme de") {
		t.Errorf("redaction took a hostname out of a word:\n%s", out)
	}
}

// TestCaptureBounded: a capture keeps at most maxCaptureEntries outputs
// and says how many it left out.
func TestCaptureBounded(t *testing.T) {
	c := newCaptureRecorder()
	for i := range maxCaptureEntries + 10 {
		c.record(filepath.Join("files", "f", strings.Repeat("x", i%7), string(rune('a'+i%26)), strconv.Itoa(i)), []byte("1"), nil)
	}
	if len(c.entries) != maxCaptureEntries || c.dropped != 10 {
		t.Errorf("got %d entries, %d dropped; want %d and 10", len(c.entries), c.dropped, maxCaptureEntries)
	}
	big := newCaptureRecorder()
	big.record("a", make([]byte, maxCaptureBytes), nil)
	big.record("b", []byte("x"), nil)
	if big.dropped != 1 {
		t.Errorf("over the byte bound: %d dropped, want 1", big.dropped)
	}
}
