package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/sim"
	"einsora.dev/edge/protocol"
)

// Verdict is the outcome of one doctor check.
type Verdict string

const (
	OK   Verdict = "ok"
	Warn Verdict = "warn"
	Fail Verdict = "fail"
)

// Check is one diagnosis, with a hint that says how to fix what is wrong.
type Check struct {
	Name    string  `json:"name"`
	Verdict Verdict `json:"verdict"`
	Detail  string  `json:"detail"`
	Fix     string  `json:"fix,omitempty"`
}

// DoctorConfig is what the doctor looks at.
type DoctorConfig struct {
	StateDir  string
	Drivers   *drivers.Host
	Inventory func(ctx context.Context) protocol.Inventory
	// Extra checks, e.g. enrolment and the hub's reachability, which the
	// network transport knows how to make.
	Extra []func(ctx context.Context) Check
}

// Doctor runs every check. It never fails itself: what it cannot look at is
// a check that fails, with a fix.
func Doctor(ctx context.Context, cfg DoctorConfig) []Check {
	checks := []Check{
		checkStateDir(cfg.StateDir),
		checkMachineID(cfg.StateDir),
		checkRunning(cfg.StateDir),
		checkRevoked(cfg.StateDir),
		checkDisk(cfg.StateDir),
	}
	if cfg.Drivers != nil {
		checks = append(checks, checkDrivers(ctx, cfg.Drivers)...)
	}
	if cfg.Inventory != nil {
		checks = append(checks, checkInventory(ctx, cfg.Inventory))
	}
	for _, extra := range cfg.Extra {
		checks = append(checks, extra(ctx))
	}
	if runtime.GOOS == "linux" {
		checks = append(checks, checkService(ctx))
	}
	return checks
}

// Failed reports whether any check failed.
func Failed(checks []Check) bool {
	for _, c := range checks {
		if c.Verdict == Fail {
			return true
		}
	}
	return false
}

func checkStateDir(dir string) Check {
	c := Check{Name: "state directory", Detail: dir}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.Verdict, c.Detail, c.Fix = Fail, dir+" does not exist", "install the agent's package, or pass --state-dir"
		return c
	case err != nil:
		c.Verdict, c.Detail, c.Fix = Fail, err.Error(), "run the doctor as the user the agent runs as (often root)"
		return c
	case !fi.IsDir():
		c.Verdict, c.Fix = Fail, "remove the file in its place"
		return c
	}
	probe, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		c.Verdict, c.Detail, c.Fix = Fail, "not writable: "+err.Error(), "run as the agent's user, or fix the directory's owner"
		return c
	}
	probe.Close()
	os.Remove(probe.Name())
	if fi.Mode().Perm()&0o007 != 0 {
		c.Verdict, c.Detail, c.Fix = Warn, fmt.Sprintf("%s is open to every user (%v)", dir, fi.Mode().Perm()), "chmod o-rwx "+dir
		return c
	}
	c.Verdict = OK
	return c
}

func checkMachineID(dir string) Check {
	c := Check{Name: "machine id"}
	b, err := os.ReadFile(filepath.Join(dir, machineIDFile))
	if err != nil {
		c.Verdict, c.Detail, c.Fix = Warn, "none yet", "it is made the first time the agent runs or enrols"
		return c
	}
	c.Verdict, c.Detail = OK, strings.TrimSpace(string(b))
	return c
}

func checkRunning(dir string) Check {
	c := Check{Name: "agent running"}
	running, err := probeRunning(dir)
	switch {
	case err != nil:
		c.Verdict, c.Detail, c.Fix = Warn, "cannot read the lock: "+err.Error(), "run the doctor as the agent's user"
	case !running:
		c.Verdict, c.Detail, c.Fix = Warn, "no agent holds "+dir, "start the service (systemctl start einsora-agent, or brew services start einsora-agent)"
	default:
		holder, _ := os.ReadFile(filepath.Join(dir, lockFile))
		c.Verdict, c.Detail = OK, "process "+strings.TrimSpace(string(holder))
	}
	return c
}

func checkRevoked(dir string) Check {
	c := Check{Name: "revocation", Verdict: OK, Detail: "the hub has not refused this machine as revoked"}
	if r := readRevoked(dir); r != nil {
		c.Verdict, c.Detail, c.Fix = Fail, "the hub revoked this machine at "+r.At.Format(time.RFC3339), r.Message
	}
	return c
}

// checkDrivers probes each driver. One that does not answer is a warning;
// none answering fails, since the hub can then place nothing here.
func checkDrivers(ctx context.Context, host *drivers.Host) []Check {
	var out []Check
	answering := 0
	for _, d := range host.All() {
		c := Check{Name: "driver " + d.Name(), Verdict: OK, Detail: "answers, isolation " + d.Isolation().String()}
		if p, ok := d.(drivers.Prober); ok {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := p.Probe(pctx)
			cancel()
			if err != nil {
				c.Verdict, c.Detail = Warn, err.Error()
				c.Fix = "start its runtime (e.g. the Docker Engine), or leave it out of --drivers"
			}
		}
		if c.Verdict == OK {
			answering++
			if d.Name() == sim.Name {
				c.Verdict, c.Detail = Warn, "sim runs nothing: for development and demos only"
				c.Fix = "offer a real runtime (--drivers auto) on a machine that runs real workloads"
			}
		}
		out = append(out, c)
	}
	if answering == 0 {
		out = append(out, Check{Name: "drivers", Verdict: Fail, Detail: "no driver answers: the agent syncs, but the hub can place nothing here",
			Fix: NoRuntimeNote(host.Names())})
	}
	return out
}

func checkInventory(ctx context.Context, probe func(context.Context) protocol.Inventory) Check {
	start := time.Now()
	inv := probe(ctx)
	took := time.Since(start).Round(time.Millisecond)
	c := Check{Name: "inventory", Verdict: OK,
		Detail: fmt.Sprintf("%s/%s, %d CPUs, %d MB, %d GPUs, probed in %s", inv.OS, inv.Arch, inv.CPUs, inv.MemoryMB, len(inv.GPUs), took)}
	if len(inv.Notes) > 0 {
		c.Verdict, c.Detail = Warn, c.Detail+"; "+strings.Join(inv.Notes, "; ")
		c.Fix = "the notes say what could not be probed; the hub sees a partial inventory"
	}
	if inv.CPUs == 0 || inv.MemoryMB == 0 {
		c.Verdict, c.Fix = Fail, "the hub rejects an inventory without CPUs or memory; report it as a bug with `einsora-agent inventory --json`"
	}
	return c
}

func checkService(ctx context.Context) Check {
	c := Check{Name: "systemd unit"}
	if _, err := exec.LookPath("systemctl"); err != nil {
		c.Verdict, c.Detail = OK, "no systemd here; nothing to check"
		return c
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(cctx, "systemctl", "is-active", "einsora-agent").Output()
	state := strings.TrimSpace(string(out))
	if state == "active" {
		c.Verdict, c.Detail = OK, "einsora-agent is active"
		return c
	}
	if state == "" {
		state = "unknown"
	}
	c.Verdict, c.Detail, c.Fix = Warn, "einsora-agent is "+state, "systemctl enable --now einsora-agent; journalctl -u einsora-agent says why it stopped"
	return c
}
