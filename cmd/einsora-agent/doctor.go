package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/clock"
	"einsora.dev/edge/internal/cli"
	"einsora.dev/edge/inventory"
)

func doctorCmd() *cobra.Command {
	var stateDir, driverList string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Diagnose this machine's agent: checks with ok, warn or fail and a fix for each; exit 1 when any fails",
		Args:  cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			log := slog.New(slog.DiscardHandler)
			cfg := agent.DoctorConfig{StateDir: stateDir, Inventory: inventory.New(inventory.Options{}).Probe, Extra: doctorExtras(stateDir)}
			// Drivers are named rather than "auto", which falls back to
			// sim, so a runtime that is down shows as a warning. They are
			// made only in a state directory that exists: the doctor
			// creates nothing.
			if _, err := os.Stat(stateDir); err == nil {
				st, _ := agent.ReadStatus(stateDir)
				if host, closeDrivers, err := agent.BuildDrivers(ctx, driverList, stateDir, st.MachineID, clock.Real{}, log); err == nil {
					defer closeDrivers()
					cfg.Drivers = host
				}
			}
			checks := agent.Doctor(ctx, cfg)
			if asJSON {
				if err := cli.PrintJSON(cmd.OutOrStdout(), checks); err != nil {
					return err
				}
			} else {
				for _, c := range checks {
					fmt.Fprintf(cmd.OutOrStdout(), "%-4s  %-18s %s\n", c.Verdict, c.Name, c.Detail)
					if c.Fix != "" {
						fmt.Fprintf(cmd.OutOrStdout(), "      %-18s fix: %s\n", "", c.Fix)
					}
				}
			}
			if agent.Failed(checks) {
				return fmt.Errorf("doctor: some checks failed")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", cli.DefaultAgentStateDir(), "state directory")
	cmd.Flags().StringVar(&driverList, "drivers", "sim,docker", "drivers to check")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON only")
	return cmd
}

// doctorExtras are the checks of enrolment and the hub, once the agent can
// be enrolled.
func doctorExtras(stateDir string) []func(context.Context) agent.Check { return nil }
