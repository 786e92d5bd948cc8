package main

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"einsora.dev/edge/drivers/vz"
	"einsora.dev/edge/internal/cli"
)

// vzHostCmd is the helper process of one VM of the vz driver. The driver
// starts it in a session of its own; it is not for people to run.
func vzHostCmd() *cobra.Command {
	var bundle string
	cmd := &cobra.Command{
		Use:    "vz-host",
		Short:  "Run one virtual machine of the vz driver (started by the agent)",
		Hidden: true,
		Args:   cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if bundle == "" {
				return &cli.UsageError{Err: errors.New("vz-host: --bundle is required")}
			}
			hv, err := vz.NewHypervisor()
			if err != nil {
				return err
			}
			// Its stderr is the bundle's helper.log.
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			return vz.RunHelper(context.Background(), bundle, hv, log)
		},
	}
	cmd.Flags().StringVar(&bundle, "bundle", "", "the VM's bundle directory")
	return cmd
}
