package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/internal/cli"
	"einsora.dev/edge/internal/dockerhost"
	"einsora.dev/edge/internal/vzhost"
	"einsora.dev/edge/inventory"
	"einsora.dev/edge/protocol"
)

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "einsora-agent",
		Short: "The Einsora node agent: runs the workloads a hub places on this machine",
	}
	root.AddCommand(runCmd(), enrollCmd(), statusCmd(), inventoryCmd(), versionCmd(), doctorCmd())
	root.AddCommand(vzhost.Command())
	root.AddCommand(cli.GenDocsCmd(root, version))
	return root
}

func versionCmd() *cobra.Command {
	return &cobra.Command{Use: "version", Short: "Print the version", Args: cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), version)
			return nil
		}}
}

func runCmd() *cobra.Command {
	var stateDir, driverList, inventoryFile, configFile, dockerHost, metricsAddr string
	var format cli.LogFormat
	var hubs []string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent daemon",
		Args:  cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			set, err := settings(cmd, configFile, stateDir, driverList, dockerHost)
			if err != nil {
				return err
			}
			log := format.Logger(cmd.ErrOrStderr(), set.level)
			ep := dockerhost.Resolve(dockerhost.FromOS(set.dockerHost))
			log.Info("docker endpoint", "host", ep.Host, "why", ep.Why)
			probe, err := inventorySource(inventoryFile, set.drivers, inventoryOptions(ep), log)
			if err != nil {
				return err
			}
			obs, err := newObserver(metricsAddr)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			err = agent.RunNetworked(ctx, agent.NetworkedConfig{
				StateDir: set.stateDir, Drivers: set.drivers, Inventory: probe, Logger: log, Version: version,
				DockerHost: ep.Host, DriverTimeout: set.driverTimeout, Hangup: hup, Observer: obs, Hubs: hubs,
			})
			if errors.Is(err, agent.ErrUnknownDriver) {
				return &cli.UsageError{Err: err}
			}
			return err
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", cli.DefaultAgentStateDir(), "state directory: machine ID, state, key and certificate, lock")
	cmd.Flags().StringVar(&driverList, "drivers", "auto", "comma-separated drivers to offer (sim, docker, docker-sandbox, macos-native), or auto: every real runtime, offered while it answers, never sim")
	cmd.Flags().StringVar(&configFile, "config", "", "JSON file with state_dir, drivers, log_level, driver_timeout, docker_host; flags win over it")
	addDockerHostFlag(cmd, &dockerHost)
	cmd.Flags().StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics at http://ADDR/metrics, on loopback only (e.g. 127.0.0.1:9464); off by default")
	cmd.Flags().Var(&format, "log-format", "log as text or json (one object a line)")
	cmd.Flags().StringArrayVar(&hubs, "hub", nil, "another replica of the hub, https://HOST:PORT (repeatable): after a failure of the hub's side (5xx, connection refused or lost) the agent syncs with the next, the one it enrolled with first")
	cmd.Flags().StringVar(&inventoryFile, "inventory-file", "", "development only, with --drivers sim: report this file's inventory (JSON) instead of probing")
	return cmd
}

func inventorySource(file, driverList string, opts inventory.Options, log *slog.Logger) (func(context.Context) protocol.Inventory, error) {
	if file == "" {
		opts.Logger = log
		return inventory.New(opts).Probe, nil
	}
	if strings.TrimSpace(driverList) != "sim" {
		return nil, cli.Usagef("--inventory-file is for development and needs --drivers sim")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("inventory file: %w", err)
	}
	var inv protocol.Inventory
	if err := json.Unmarshal(b, &inv); err != nil {
		return nil, fmt.Errorf("inventory file %s: %w", file, err)
	}
	return func(context.Context) protocol.Inventory { return inv }, nil
}

func statusCmd() *cobra.Command {
	var stateDir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the agent's machine ID, desired state, and each workload's state and last driver error",
		Args:  cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := agent.ReadStatus(stateDir)
			if err != nil {
				return err
			}
			if asJSON {
				return cli.PrintJSON(cmd.OutOrStdout(), st)
			}
			printStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", cli.DefaultAgentStateDir(), "state directory")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON only")
	return cmd
}

// printStatus writes st for a person: each workload on a line, and under it
// the last driver error, which only this machine keeps.
func printStatus(w io.Writer, st agent.Status) {
	hubURL := st.Hub
	if hubURL == "" {
		hubURL = "in-process (solo), or not enrolled"
	}
	fmt.Fprintf(w, "machine:    %s\nhub:        %s\nstate dir:  %s\nrunning:    %v\nlast sync:  %s\ngeneration: %d\n",
		st.MachineID, hubURL, st.StateDir, st.Running, st.LastSync, st.DesiredGeneration)
	if len(st.Hubs) > 0 {
		// Learned from the hub: where the agent goes after --hub fails.
		fmt.Fprintf(w, "replicas:   %s\n", strings.Join(st.Hubs, " "))
	}
	if r := st.Revoked; r != nil {
		fmt.Fprintf(w, "REVOKED:    at %s: %s\n", r.At.UTC().Format(time.RFC3339), r.Message)
	}
	if len(st.Workloads) == 0 {
		fmt.Fprintln(w, "workloads:  none")
		return
	}
	fmt.Fprintln(w, "workloads:")
	for _, ws := range st.Workloads {
		state := string(ws.State)
		if state == "" {
			state = "held, not yet reported"
		}
		fmt.Fprintf(w, "  %-24s %-14s", ws.ID, state)
		if ws.Mode != "" {
			fmt.Fprintf(w, " %s, attempt %d", ws.Mode, ws.Attempt)
		}
		if ws.Detail != "" {
			fmt.Fprintf(w, ": %s", ws.Detail)
		}
		fmt.Fprintln(w)
		if e := ws.LastError; e != nil {
			fmt.Fprintf(w, "  %-24s last error:    %s via %s at %s: %s\n", "", e.Op, e.Driver, e.At.UTC().Format(time.RFC3339), e.Error)
		}
	}
}

func inventoryCmd() *cobra.Command {
	var asJSON bool
	var dockerHost, captureDir string
	cmd := &cobra.Command{
		Use:   "inventory",
		Short: "Print what this machine would report to a hub",
		Args:  cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			inv, err := probeOrCapture(ctx, inventory.New(inventoryOptions(dockerhost.Resolve(dockerhost.FromOS(dockerHost)))), captureDir)
			if err != nil {
				return err
			}
			if asJSON {
				return cli.PrintJSON(cmd.OutOrStdout(), inv)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "os:        %s/%s %s (kernel %s)\ncpu:       %s, %d CPUs\nmemory:    %d MB\n",
				inv.OS, inv.Arch, inv.OSVersion, inv.Kernel, inv.CPUModel, inv.CPUs, inv.MemoryMB)
			for _, g := range inv.GPUs {
				switch {
				case g.Parent != "":
					fmt.Fprintf(out, "gpu:         MIG %s, %d MB (%s)\n", g.Profile, g.MemoryMB, g.ID)
				case g.MIGMode != "":
					fmt.Fprintf(out, "gpu:       %s %s (%s), MIG %s\n", g.Vendor, g.Model, g.ID, g.MIGMode)
				default:
					fmt.Fprintf(out, "gpu:       %s %s (%s)\n", g.Vendor, g.Model, g.ID)
				}
			}
			if inv.Docker != nil {
				fmt.Fprintf(out, "docker:    %s %s, runtimes %s\n", inv.Docker.Kind, inv.Docker.Version, strings.Join(inv.Docker.Runtimes, ", "))
			}
			for _, n := range inv.Notes {
				fmt.Fprintf(out, "note:      %s\n", n)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON only")
	addDockerHostFlag(cmd, &dockerHost)
	cmd.Flags().StringVar(&captureDir, "capture", "", "also write the raw outputs the probes read to this directory, redacted, for a bug report")
	return cmd
}
