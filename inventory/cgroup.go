package inventory

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A container's limits live in its cgroup, not in /proc: a container given
// 2 CPUs and 4 GiB still sees the host's 64 CPUs and 512 GiB there. The
// limit of any ancestor cgroup applies too, so the smallest on the way from
// the agent's cgroup up to the hierarchy's root is the one that counts.

// cgroupMount is where the cgroup hierarchies are mounted; finding them
// through mountinfo is left out, as every distribution and container
// runtime in use mounts them here.
const cgroupMount = "/sys/fs/cgroup"

// unlimitedV1 is where cgroup v1 memory limits stop meaning anything: "no
// limit" reads as 2^63 rounded down to a page.
const unlimitedV1 = 1 << 62

// cgroupCPULimit returns the whole CPUs that the cgroup quota allows,
// rounded down but at least 1, or 0 when there is no quota.
func cgroupCPULimit(p *Prober) (int, error) {
	cpus := math.Inf(1)
	err := walkCgroup(p, "cpu", func(dir string, v2 bool) error {
		var quota, period float64
		var err error
		if v2 {
			quota, period, err = readCPUMax(p, filepath.Join(dir, "cpu.max"))
		} else {
			quota, period, err = readCFS(p, dir)
		}
		if err != nil || quota <= 0 || period <= 0 {
			return err
		}
		cpus = math.Min(cpus, quota/period)
		return nil
	})
	if err != nil {
		err = fmt.Errorf("read cgroup cpu limit: %w", err)
	}
	if cpus >= 1<<16 {
		// No quota, or one too large to mean anything.
		return 0, err
	}
	// Rounded down: a workload asking for 2 CPUs does not fit in 1.5.
	return max(1, int(cpus)), err
}

// readCPUMax reads cgroup v2 cpu.max: "max 100000" or "150000 100000".
func readCPUMax(p *Prober, path string) (quota, period float64, err error) {
	line, err := p.readLine(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	q, per, ok := strings.Cut(line, " ")
	if q == "max" {
		return 0, 0, nil
	}
	quota, qerr := strconv.ParseFloat(q, 64)
	period, perr := strconv.ParseFloat(per, 64)
	if !ok || qerr != nil || perr != nil {
		return 0, 0, fmt.Errorf("parse cpu.max %q", line)
	}
	return quota, period, nil
}

// readCFS reads cgroup v1 cpu.cfs_quota_us (-1 for none) and
// cpu.cfs_period_us.
func readCFS(p *Prober, dir string) (quota, period float64, err error) {
	q, err := p.readLine(filepath.Join(dir, "cpu.cfs_quota_us"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	if quota, err = strconv.ParseFloat(q, 64); err != nil {
		return 0, 0, fmt.Errorf("parse cpu.cfs_quota_us %q", q)
	}
	if quota <= 0 {
		return 0, 0, nil
	}
	per, err := p.readLine(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, 0, err
	}
	if period, err = strconv.ParseFloat(per, 64); err != nil {
		return 0, 0, fmt.Errorf("parse cpu.cfs_period_us %q", per)
	}
	return quota, period, nil
}

// cgroupMemoryLimit returns the cgroup's memory limit in bytes, or 0 when
// there is none.
func cgroupMemoryLimit(p *Prober) (uint64, error) {
	var limit uint64
	err := walkCgroup(p, "memory", func(dir string, v2 bool) error {
		name, unlimited := "memory.limit_in_bytes", "-1"
		if v2 {
			name, unlimited = "memory.max", "max"
		}
		line, err := p.readLine(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) || line == unlimited {
			return nil
		}
		if err != nil {
			return err
		}
		n, err := strconv.ParseUint(line, 10, 64)
		if err != nil {
			return fmt.Errorf("parse %s %q", name, line)
		}
		if n > 0 && n < unlimitedV1 && (limit == 0 || n < limit) {
			limit = n
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("read cgroup memory limit: %w", err)
	}
	return limit, err
}

// walkCgroup calls visit for the agent's cgroup directory of controller
// and each of its ancestors up to the hierarchy's root. Without a
// /proc/self/cgroup there is nothing to walk and no error: not every
// machine has cgroups.
func walkCgroup(p *Prober, controller string, visit func(dir string, v2 bool) error) error {
	data, err := p.readFile(p.path("/proc/self/cgroup"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	mount, rel, v2, ok := findCgroup(p, string(data), controller)
	if !ok {
		return nil
	}
	dir := filepath.Join(mount, rel)
	if _, err := os.Stat(dir); err != nil || !within(dir, mount) {
		// Without a cgroup namespace a container sees its host's path but
		// has its own cgroup mounted at the root.
		dir = mount
	}
	var errs []error
	for {
		if err := visit(dir, v2); err != nil {
			errs = append(errs, err)
		}
		if !within(dir, mount) || dir == mount {
			break
		}
		dir = filepath.Dir(dir)
	}
	return errors.Join(errs...)
}

// findCgroup finds, from /proc/self/cgroup, the mount and the path of the
// agent's cgroup for controller. A unified (v2) hierarchy is used when it
// is mounted at the root, as on every current distribution; otherwise the
// v1 hierarchy of the controller.
func findCgroup(p *Prober, selfCgroup, controller string) (mount, rel string, v2, ok bool) {
	root := p.path(cgroupMount)
	unified := fileExists(filepath.Join(root, "cgroup.controllers"))
	for line := range strings.Lines(selfCgroup) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		id, controllers, path := parts[0], parts[1], parts[2]
		if unified {
			if id == "0" && controllers == "" {
				return root, path, true, true
			}
			continue
		}
		for c := range strings.SplitSeq(controllers, ",") {
			if c != controller {
				continue
			}
			// v1 hierarchies are mounted under their joined names
			// ("cpu,cpuacct"), often with a link per controller.
			for _, name := range []string{controllers, controller} {
				if m := filepath.Join(root, name); fileExists(m) {
					return m, path, false, true
				}
			}
		}
	}
	return "", "", false, false
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}
