package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"time"

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
// tests); see LoadMachineID. "auto" means every real driver that answers now,
// and sim when none does, so a fresh development machine still runs
// something. The returned func closes them.
func BuildDrivers(ctx context.Context, list, stateDir, machineID string, clk clock.Clock, log *slog.Logger) (*drivers.Host, func(), error) {
	var ds []drivers.Driver
	closeAll := func() {
		for _, d := range ds {
			if c, ok := d.(interface{ Close() error }); ok {
				c.Close()
			}
		}
	}
	add := func(name string) error {
		switch name {
		case sim.Name:
			d, err := sim.New(filepath.Join(stateDir, "sim"), clk)
			if err != nil {
				return err
			}
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
			d, err := docker.New(docker.Options{Name: name, Machine: machineID, StateDir: stateDir, Logger: log})
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
			err = addAnswering(ctx, add, &ds, log)
		default:
			err = add(name)
		}
		if err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	if len(ds) == 0 {
		return nil, nil, errors.New("no driver to offer: name at least one")
	}
	return drivers.NewHost(ds...), closeAll, nil
}

// addAnswering adds the real drivers whose runtime answers now.
func addAnswering(ctx context.Context, add func(string) error, ds *[]drivers.Driver, log *slog.Logger) error {
	before := len(*ds)
	names := []string{docker.NameContainer, docker.NameSandbox}
	if runtime.GOOS == "darwin" {
		// Native processes are how a Mac's workloads reach its GPU; the
		// hub offers them only to the machine owner's own workloads.
		names = append(names, macosnative.Name)
		if vz.Available {
			names = append(names, vz.Name)
		}
	}
	for _, name := range names {
		if err := add(name); err != nil {
			return err
		}
		d := (*ds)[len(*ds)-1]
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := d.(drivers.Prober).Probe(pctx)
		cancel()
		if err != nil {
			log.Info("driver not offered: its runtime does not answer", "driver", name, "err", err)
			if c, ok := d.(interface{ Close() error }); ok {
				c.Close()
			}
			*ds = (*ds)[:len(*ds)-1]
		}
	}
	if len(*ds) == before {
		log.Warn("no real runtime answers; offering the sim driver, which runs nothing")
		return add(sim.Name)
	}
	return nil
}
