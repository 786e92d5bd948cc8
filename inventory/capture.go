package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"einsora.dev/edge/protocol"
)

// recorder keeps the raw outputs the probes read, for `einsora-agent
// inventory --capture`. Probes read through the Prober (readFile, run,
// dockerGet, a recording sysctler), which hands what it read to the
// recorder when there is one; the probing itself is the same.
type recorder interface {
	// record keeps data read from name: "files/proc/cpuinfo",
	// "commands/nvidia-smi -q -x", "docker/version", "sysctl/hw.memsize".
	// err is what reading it gave, if anything.
	record(name string, data []byte, err error)
}

// readFile reads a file of the probed machine, recording it.
func (p *Prober) readFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if p.rec != nil && !errors.Is(err, os.ErrNotExist) {
		rel := path
		if p.root != "/" {
			rel = strings.TrimPrefix(path, p.root)
		}
		p.rec.record("files"+rel, data, err)
	}
	return data, err
}

// recordingRunner runs commands with run and records their output.
func recordingRunner(run runner, rec recorder) runner {
	return func(ctx context.Context, timeout time.Duration, name string, args ...string) ([]byte, error) {
		out, err := run(ctx, timeout, name, args...)
		if !errors.Is(err, errAbsent) {
			rec.record("commands/"+strings.Join(append([]string{filepath.Base(name)}, args...), " "), out, err)
		}
		return out, err
	}
}

// Bounds on a capture: a machine's probe reads a few hundred small files
// and a few command outputs, each already capped at maxOutput.
const (
	maxCaptureEntries = 4096
	maxCaptureBytes   = 64 << 20
)

// captureRecorder holds a capture in memory until it is written.
type captureRecorder struct {
	mu      sync.Mutex
	entries map[string][]byte
	errs    map[string]string
	size    int
	dropped int
}

func newCaptureRecorder() *captureRecorder {
	return &captureRecorder{entries: map[string][]byte{}, errs: map[string]string{}}
}

func (c *captureRecorder) record(name string, data []byte, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, seen := c.entries[name]; seen {
		return
	}
	if len(c.entries) >= maxCaptureEntries || c.size+len(data) > maxCaptureBytes {
		c.dropped++
		return
	}
	c.entries[name] = slices.Clone(data)
	c.size += len(data)
	if err != nil {
		c.errs[name] = err.Error()
	}
}

// Capture probes like Probe and writes the raw outputs the probes read
// under dir (made if need be): files/ (under /proc, /sys, /etc),
// commands/ (nvidia-smi, system_profiler, ioreg, sw_vers), docker/
// (/version, /info) and sysctl.txt, with MANIFEST.txt listing them and
// inventory.json the result. Hostnames, serial numbers and UUIDs are
// redacted, so that the capture can be attached to a bug report.
func (p *Prober) Capture(ctx context.Context, dir string) (protocol.Inventory, error) {
	rec := newCaptureRecorder()
	q := *p
	q.rec = rec
	q.run = recordingRunner(p.run, rec)
	if q.live {
		q.probers = platformProbers(rec)
	}
	inv := q.Probe(ctx)
	r := newRedactor(rec, inv, q.hostname)
	return inv, rec.write(dir, r, inv)
}

func (c *captureRecorder) write(dir string, r *redactor, inv protocol.Inventory) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	names := make([]string, 0, len(c.entries))
	for name := range c.entries {
		names = append(names, name)
	}
	slices.Sort(names)
	var manifest, sysctl strings.Builder
	manifest.WriteString("einsora-agent inventory capture: the raw outputs the probes read.\n" +
		"Hostnames, serial numbers and UUIDs are redacted.\n\n")
	for _, name := range names {
		data := r.redact(c.entries[name])
		fmt.Fprintf(&manifest, "%s (%d bytes)", name, len(data))
		if e := c.errs[name]; e != "" {
			fmt.Fprintf(&manifest, ": error: %s", r.redact([]byte(e)))
		}
		manifest.WriteString("\n")
		if key, ok := strings.CutPrefix(name, "sysctl/"); ok {
			fmt.Fprintf(&sysctl, "%s: %s\n", key, data)
			continue
		}
		if err := writeCaptured(dir, name, data); err != nil {
			return err
		}
	}
	if c.dropped > 0 {
		fmt.Fprintf(&manifest, "\n%d more outputs left out: over %d entries or %d bytes\n", c.dropped, maxCaptureEntries, maxCaptureBytes)
	}
	if sysctl.Len() > 0 {
		if err := writeCaptured(dir, "sysctl.txt", []byte(sysctl.String())); err != nil {
			return err
		}
	}
	invJSON, err := json.MarshalIndent(inv, "", "  ")
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	if err := writeCaptured(dir, "inventory.json", r.redact(append(invJSON, '\n'))); err != nil {
		return err
	}
	return writeCaptured(dir, "MANIFEST.txt", []byte(manifest.String()))
}

// writeCaptured writes one output under dir; a name cannot leave dir.
func writeCaptured(dir, name string, data []byte) error {
	path := filepath.Join(dir, filepath.FromSlash(name))
	if !within(path, dir) {
		return fmt.Errorf("capture: %q leaves the capture directory", name)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	return nil
}

// redactor removes what identifies a machine from captured text.
type redactor struct {
	// secrets are literal strings to replace (hostnames, sysfs serials),
	// longest first, with their stand-ins.
	secrets []string
	standIn map[string]string
	// hosts match hostnames as whole words, so that a short one ("vm")
	// is not taken out of other words ("vme").
	hosts []*regexp.Regexp
	uuids map[string]string // each UUID seen, to a stand-in
}

var (
	uuidPattern = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	// Serial numbers as the sources print them: nvidia-smi's <serial>;
	// ioreg's and system_profiler's "...serial..." keys; Docker's /info
	// "ID", the engine's identity; a Raspberry Pi's "Serial : ..." line.
	// Files of sysfs that hold one (serial, unique_id) are taken whole.
	serialTag   = regexp.MustCompile(`(<serial>)[^<]*(</serial>)`)
	serialKey   = regexp.MustCompile(`("[A-Za-z_ ]*(?i:serial)[A-Za-z_ ]*"\s*[:=]\s*)"[^"]*"`)
	dockerID    = regexp.MustCompile(`("ID"\s*:\s*)"[^"]*"`)
	serialLine  = regexp.MustCompile(`(?m)^(Serial\s*:\s*)\S.*$`)
	serialFiles = []string{"/serial", "/unique_id", "/serial_number", "/product_serial", "/board_serial"}
)

func newRedactor(c *captureRecorder, inv protocol.Inventory, hostname func() string) *redactor {
	r := &redactor{standIn: map[string]string{}, uuids: map[string]string{}}
	hosts := []string{inv.Hostname}
	if hostname != nil {
		hosts = append(hosts, hostname())
	}
	c.mu.Lock()
	var info struct{ Name string }
	if json.Unmarshal(c.entries["docker/info"], &info) == nil {
		hosts = append(hosts, info.Name)
	}
	hosts = append(hosts, string(c.entries["sysctl/kern.hostname"]), string(c.entries["files/proc/sys/kernel/hostname"]))
	ids := 0
	for name, data := range c.entries {
		for _, suffix := range serialFiles {
			if v := strings.TrimSpace(string(data)); strings.HasSuffix(name, suffix) && len(v) >= 4 {
				if _, ok := r.standIn[v]; !ok {
					ids++
					r.add(v, fmt.Sprintf("redacted-id-%d", ids))
				}
			}
		}
	}
	c.mu.Unlock()
	var names []string
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		short, _, _ := strings.Cut(h, ".")
		for _, v := range []string{h, short} {
			if v != "" && v != "localhost" && !slices.Contains(names, v) {
				names = append(names, v)
			}
		}
	}
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	for _, n := range names {
		r.hosts = append(r.hosts, regexp.MustCompile(`(^|[^A-Za-z0-9_-])`+regexp.QuoteMeta(n)+`($|[^A-Za-z0-9_-])`))
	}
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

func (r *redactor) add(secret, standIn string) {
	if _, ok := r.standIn[secret]; !ok {
		r.secrets = append(r.secrets, secret)
		r.standIn[secret] = standIn
	}
}

// redact replaces hostnames with "redacted-host", serial numbers with
// "REDACTED" (or "redacted-id-N" where they serve as IDs), and each UUID
// with a stand-in of the same shape, the same for the same UUID, so that a
// MIG device still names its GPU.
func (r *redactor) redact(data []byte) []byte {
	s := string(data)
	for _, v := range r.secrets {
		s = strings.ReplaceAll(s, v, r.standIn[v])
	}
	for _, re := range r.hosts {
		// Twice: a match takes the character after it, which may start
		// the next ("vm vm").
		for range 2 {
			s = re.ReplaceAllString(s, "${1}redacted-host${2}")
		}
	}
	s = serialTag.ReplaceAllString(s, `${1}REDACTED${2}`)
	s = serialKey.ReplaceAllString(s, `${1}"REDACTED"`)
	s = dockerID.ReplaceAllString(s, `${1}"REDACTED"`)
	s = serialLine.ReplaceAllString(s, "${1}REDACTED")
	s = uuidPattern.ReplaceAllStringFunc(s, func(u string) string {
		key := strings.ToLower(u)
		if v, ok := r.uuids[key]; ok {
			return v
		}
		v := fmt.Sprintf("00000000-0000-4000-8000-%012x", len(r.uuids)+1)
		r.uuids[key] = v
		return v
	})
	return []byte(s)
}
