package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/clock"
	"einsora.dev/edge/internal/cli"
	"einsora.dev/edge/inventory"
	"einsora.dev/edge/protocol"
)

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "einsora-agent",
		Short: "The Einsora node agent: runs the workloads a hub places on this machine",
	}
	root.AddCommand(runCmd(), enrollCmd(), statusCmd(), inventoryCmd(), versionCmd(), doctorCmd())
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
	var stateDir, driverList, inventoryFile, configFile string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent daemon",
		Args:  cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			set, err := settings(cmd, configFile, stateDir, driverList)
			if err != nil {
				return err
			}
			stateDir, driverList = set.stateDir, set.drivers
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: set.level}))
			id, err := agent.LoadMachineID(stateDir)
			if err != nil {
				return err
			}
			host, closeDrivers, err := agent.BuildDrivers(cmd.Context(), driverList, stateDir, id, clock.Real{}, log)
			if errors.Is(err, agent.ErrUnknownDriver) {
				return &cli.UsageError{Err: err}
			}
			if err != nil {
				return err
			}
			defer closeDrivers()
			probe, err := inventorySource(inventoryFile, driverList, log)
			if err != nil {
				return err
			}
			// The lock first: a second agent is told who holds it before
			// anything else is looked at.
			a, err := agent.Open(agent.Config{
				StateDir: stateDir, Drivers: host, Inventory: probe, Logger: log, Version: version,
				DriverTimeout: set.driverTimeout,
			})
			if err != nil {
				return err
			}
			defer a.Close()
			nw, err := networkTransport(stateDir, log)
			if err != nil {
				return err
			}
			a.SetTransport(nw.Transport())
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log.Info("agent running", "machine", a.MachineID(), "state", stateDir, "drivers", host.Names())
			go a.NotifyService(ctx)
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			go func() {
				for range hup {
					log.Info("SIGHUP: probing inventory again")
					a.Reprobe()
				}
			}()
			renewal := make(chan struct{})
			go func() { defer close(renewal); nw.RunRenewal(ctx) }()
			defer func() { stop(); <-renewal }()
			return a.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", cli.DefaultAgentStateDir(), "state directory: machine ID, state, key and certificate, lock")
	cmd.Flags().StringVar(&driverList, "drivers", "auto", "comma-separated drivers to offer (sim, docker, docker-sandbox, macos-native), or auto: every runtime that answers")
	cmd.Flags().StringVar(&configFile, "config", "", "JSON file with state_dir, drivers, log_level, driver_timeout; flags win over it")
	cmd.Flags().StringVar(&inventoryFile, "inventory-file", "", "development only, with --drivers sim: report this file's inventory (JSON) instead of probing")
	return cmd
}

func inventorySource(file, driverList string, log *slog.Logger) (func(context.Context) protocol.Inventory, error) {
	if file == "" {
		return inventory.New(inventory.Options{Logger: log}).Probe, nil
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
		Short: "Show the agent's machine ID, desired state and the workloads it holds",
		Args:  cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := agent.ReadStatus(stateDir)
			if err != nil {
				return err
			}
			if asJSON {
				return cli.PrintJSON(cmd.OutOrStdout(), st)
			}
			hubURL := st.Hub
			if hubURL == "" {
				hubURL = "in-process (solo), or not enrolled"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "machine:    %s\nhub:        %s\nstate dir:  %s\nrunning:    %v\nlast sync:  %s\ngeneration: %d\nworkloads:  %s\n",
				st.MachineID, hubURL, st.StateDir, st.Running, st.LastSync, st.DesiredGeneration, strings.Join(st.Workloads, ", "))
			return nil
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", cli.DefaultAgentStateDir(), "state directory")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON only")
	return cmd
}

func inventoryCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inventory",
		Short: "Print what this machine would report to a hub",
		Args:  cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			inv := inventory.New(inventory.Options{}).Probe(ctx)
			if asJSON {
				return cli.PrintJSON(cmd.OutOrStdout(), inv)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "os:        %s/%s %s (kernel %s)\ncpu:       %s, %d CPUs\nmemory:    %d MB\n",
				inv.OS, inv.Arch, inv.OSVersion, inv.Kernel, inv.CPUModel, inv.CPUs, inv.MemoryMB)
			for _, g := range inv.GPUs {
				fmt.Fprintf(out, "gpu:       %s %s (%s)\n", g.Vendor, g.Model, g.ID)
			}
			if inv.Docker != nil {
				fmt.Fprintf(out, "docker:    %s, runtimes %s\n", inv.Docker.Version, strings.Join(inv.Docker.Runtimes, ", "))
			}
			for _, n := range inv.Notes {
				fmt.Fprintf(out, "note:      %s\n", n)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON only")
	return cmd
}
