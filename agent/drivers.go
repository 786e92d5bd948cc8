package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers"
	"einsora.dev/edge/drivers/docker"
	"einsora.dev/edge/drivers/macosnative"
	"einsora.dev/edge/drivers/sim"
	"einsora.dev/edge/drivers/vz"
)

// ErrUnknownDriver is returned for a driver name this build does not have.
var ErrUnknownDriver = errors.New("unknown driver")

// BuildDrivers makes the drivers named in list (comma-separated) with their
// state under stateDir. machineID scopes what a driver sees on a runtime it
// may share with other agents (a fleet on one box, an engine shared by
// tests); see LoadMachineID. "auto" means every real runtime this build
// has for the platform (docker, docker-sandbox, and macos-native on a Mac)
// and never sim, which runs nothing: sim comes only from being named. Which
// drivers are offered is decided by probing them, by the running agent on
// every inventory refresh, so a runtime that starts later is picked up. The
// returned func closes them.
func BuildDrivers(ctx context.Context, list, stateDir, machineID string, clk clock.Clock, log *slog.Logger) (*drivers.Host, func(), error) {
	return BuildDriversOn(ctx, list, stateDir, machineID, "", clk, log)
}

// BuildDriversOn is BuildDrivers with the Docker drivers on dockerHost, the
// endpoint the agent resolved once (dockerhost.Resolve) for its inventory
// too; "" lets the driver resolve it alike.
func BuildDriversOn(ctx context.Context, list, stateDir, machineID, dockerHost string, clk clock.Clock, log *slog.Logger) (*drivers.Host, func(), error) {
	var ds []drivers.Driver
	closeAll := func() {
		for _, d := range ds {
			if c, ok := d.(interface{ Close() error }); ok {
				c.Close()
			}
		}
	}
	have := map[string]bool{}
	add := func(name string) error {
		if have[name] {
			return nil
		}
		have[name] = true
		switch name {
		case sim.Name:
			d, err := sim.New(filepath.Join(stateDir, "sim"), clk)
			if err != nil {
				return err
			}
			log.Warn("offering the sim driver, which runs nothing: for development and demos only")
			ds = append(ds, d)
		case macosnative.Name:
			d, err := macosnative.New(macosnative.Options{Dir: filepath.Join(stateDir, macosnative.Name), Logger: log})
			if err != nil {
				return err
			}
			ds = append(ds, d)
		case vz.Name:
			if !vz.Available {
				return fmt.Errorf("%w %q: this build has no vz: Virtualization.framework needs a darwin build with cgo", ErrUnknownDriver, name)
			}
			d, err := vz.New(vz.Options{Dir: filepath.Join(stateDir, vz.Name), Logger: log, Clock: clk})
			if err != nil {
				return err
			}
			ds = append(ds, d)
		case docker.NameContainer, docker.NameSandbox:
			d, err := docker.New(docker.Options{Name: name, Host: dockerHost, Machine: machineID, StateDir: stateDir, Logger: log})
			if err != nil {
				return err
			}
			ds = append(ds, d)
		default:
			return fmt.Errorf("%w %q: this build offers sim, docker, docker-sandbox, macos-native and auto", ErrUnknownDriver, name)
		}
		return nil
	}
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		var err error
		switch name {
		case "":
		case "auto":
			for _, n := range realRuntimes() {
				if err = add(n); err != nil {
					break
				}
			}
		default:
			err = add(name)
		}
		if err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	if len(ds) == 0 {
		return nil, nil, errors.New("no driver to offer: name at least one, or auto")
	}
	return drivers.NewHost(ds...), closeAll, nil
}

// realRuntimes are the drivers auto stands for on this platform.
func realRuntimes() []string {
	names := []string{docker.NameContainer, docker.NameSandbox}
	if runtime.GOOS == "darwin" {
		// Native processes are how a Mac's workloads reach its GPU; the
		// hub offers them only to the machine owner's own workloads.
		names = append(names, macosnative.Name)
		if vz.Available {
			names = append(names, vz.Name)
		}
	}
	return names
}

// NoRuntimeNote says which runtime to start when none of the drivers in
// names answers. It goes into the inventory, so the hub's operator reads it
// too, and the doctor gives it as its fix.
func NoRuntimeNote(names []string) string {
	for _, n := range names {
		if n == docker.NameContainer || n == docker.NameSandbox {
			return "no container runtime answers: start Docker (systemctl start docker, or open Docker Desktop); the agent picks it up at its next inventory probe, or at once on SIGHUP"
		}
	}
	return "no runtime answers for drivers " + strings.Join(names, ", ") + ": start their runtimes; the agent picks them up at its next inventory probe, or at once on SIGHUP"
}
