package inventory

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"einsora.dev/edge/protocol"
)

// linuxProbers are the probers of a Linux machine, in the order their
// results are applied.
func linuxProbers() []prober {
	return []prober{
		{"host", probeLinuxHost},
		{"cpu", probeLinuxCPU},
		{"memory", probeLinuxMemory},
		{"nvidia", probeNVIDIA},
		{"drm", probeDRM},
		{"docker", probeDocker},
	}
}

// probeLinuxHost reads the names: OS release, kernel, hostname, CPU model,
// and whether KVM is there.
func probeLinuxHost(_ context.Context, p *Prober) (func(*protocol.Inventory), error) {
	var errs []error
	osVersion, err := readOSRelease(p)
	if err != nil {
		errs = append(errs, err)
	}
	// /proc/sys/kernel/osrelease is what uname(2) reports as the release.
	kernel, err := p.readLine(p.path("/proc/sys/kernel/osrelease"))
	if err != nil {
		errs = append(errs, fmt.Errorf("read kernel release: %w", err))
	}
	hostname, err := p.readLine(p.path("/proc/sys/kernel/hostname"))
	if err != nil && p.hostname != nil {
		hostname, err = p.hostname(), nil
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("read hostname: %w", err))
	}
	var cpuModel string
	if data, err := p.readFile(p.path("/proc/cpuinfo")); err != nil {
		errs = append(errs, fmt.Errorf("read cpuinfo: %w", err))
	} else {
		cpuModel = parseCPUModel(data)
	}
	_, kvmErr := os.Stat(p.path("/dev/kvm"))
	return func(inv *protocol.Inventory) {
		inv.OSVersion = osVersion
		inv.Kernel = kernel
		inv.Hostname = hostname
		inv.CPUModel = cpuModel
		inv.Virtualization = kvmErr == nil
	}, errors.Join(errs...)
}

// readOSRelease returns PRETTY_NAME from os-release(5), which lives in /etc
// or, failing that, /usr/lib.
func readOSRelease(p *Prober) (string, error) {
	data, err := p.readFile(p.path("/etc/os-release"))
	if errors.Is(err, fs.ErrNotExist) {
		data, err = p.readFile(p.path("/usr/lib/os-release"))
	}
	if err != nil {
		return "", fmt.Errorf("read os-release: %w", err)
	}
	return parseOSRelease(data), nil
}

// parseOSRelease returns PRETTY_NAME, falling back to NAME VERSION_ID.
func parseOSRelease(data []byte) string {
	vals := map[string]string{}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		vals[k] = unquoteShell(v)
	}
	if v := vals["PRETTY_NAME"]; v != "" {
		return v
	}
	return strings.TrimSpace(vals["NAME"] + " " + vals["VERSION_ID"])
}

// unquoteShell undoes the shell quoting os-release allows.
func unquoteShell(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		q := v[0]
		v = v[1 : len(v)-1]
		if q == '"' {
			r := strings.NewReplacer(`\"`, `"`, `\\`, `\`, `\$`, `$`, "\\`", "`")
			v = r.Replace(v)
		}
	}
	return v
}

// parseCPUModel returns the first "model name" of /proc/cpuinfo; arm64
// kernels print none, so there it is made from each CPU's implementer and
// part (armModel).
func parseCPUModel(data []byte) string {
	var cores []armCore
	var cur armCore
	flush := func() {
		if cur.implementer != "" {
			cores = append(cores, cur)
		}
		cur = armCore{}
	}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "model name":
			if v != "" {
				return v
			}
		case "processor":
			flush()
		case "CPU implementer":
			cur.implementer = v
		case "CPU part":
			cur.part = v
		}
	}
	flush()
	return armModel(cores)
}

// probeLinuxCPU counts the CPUs this agent may use: the online CPUs (the
// affinity mask when live), cut to the cgroup's CPU quota.
func probeLinuxCPU(_ context.Context, p *Prober) (func(*protocol.Inventory), error) {
	var errs []error
	n := 0
	if p.numCPU != nil {
		n = p.numCPU()
	} else {
		var err error
		if n, err = onlineCPUs(p); err != nil {
			errs = append(errs, err)
		}
	}
	limit, err := cgroupCPULimit(p)
	if err != nil {
		errs = append(errs, err)
	}
	if limit > 0 && (n == 0 || limit < n) {
		n = limit
	}
	if n == 0 {
		return nil, errors.Join(errs...)
	}
	return func(inv *protocol.Inventory) { inv.CPUs = n }, errors.Join(errs...)
}

// onlineCPUs counts /sys/devices/system/cpu/online, or the processors in
// /proc/cpuinfo when sysfs is not there.
func onlineCPUs(p *Prober) (int, error) {
	line, err := p.readLine(p.path("/sys/devices/system/cpu/online"))
	if err == nil {
		n, perr := countCPUList(line)
		if perr == nil {
			return n, nil
		}
		err = perr
	}
	data, cerr := p.readFile(p.path("/proc/cpuinfo"))
	if cerr != nil {
		return 0, fmt.Errorf("count cpus: %w", err)
	}
	n := 0
	for line := range strings.Lines(string(data)) {
		if k, _, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "processor" {
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("count cpus: no processor in cpuinfo")
	}
	return n, nil
}

// countCPUList counts a kernel CPU list such as "0-3,8-11,16".
func countCPUList(s string) (int, error) {
	n := 0
	for part := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("parse cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("parse cpu list %q: %w", s, err)
			}
		}
		// The kernel allows 8192 CPUs; a wider range is garbage, and
		// would overflow the sum.
		if a < 0 || b < a || b-a >= 1<<16 {
			return 0, fmt.Errorf("parse cpu list %q: range %d-%d", s, a, b)
		}
		n += b - a + 1
	}
	if n == 0 {
		return 0, fmt.Errorf("parse cpu list %q: empty", s)
	}
	return n, nil
}

// probeLinuxMemory reads MemTotal, cut to the cgroup's memory limit.
func probeLinuxMemory(_ context.Context, p *Prober) (func(*protocol.Inventory), error) {
	var errs []error
	var total uint64
	data, err := p.readFile(p.path("/proc/meminfo"))
	if err == nil {
		total, err = parseMemTotal(data)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("read meminfo: %w", err))
	}
	limit, err := cgroupMemoryLimit(p)
	if err != nil {
		errs = append(errs, err)
	}
	if limit > 0 && (total == 0 || limit < total) {
		total = limit
	}
	mb := int(total >> 20)
	if mb == 0 {
		return nil, errors.Join(errs...)
	}
	return func(inv *protocol.Inventory) { inv.MemoryMB = mb }, errors.Join(errs...)
}

// parseMemTotal returns MemTotal from /proc/meminfo, in bytes.
func parseMemTotal(data []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(rest), " ")
		kb, err := strconv.ParseUint(num, 10, 64)
		if err != nil || unit != "kB" {
			return 0, fmt.Errorf("parse MemTotal %q", strings.TrimSpace(rest))
		}
		return kb << 10, nil
	}
	return 0, errors.New("no MemTotal")
}

// readLine returns the first line of a small file, trimmed.
func (p *Prober) readLine(path string) (string, error) {
	data, err := p.readFile(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	return strings.TrimSpace(line), nil
}
