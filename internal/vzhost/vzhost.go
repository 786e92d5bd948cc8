// Package vzhost is the hidden "vz-host" command of both binaries: the
// helper process of one VM of the vz driver. The driver runs its own
// executable as the helper, so einsora-agent and einsora-hub solo (whose
// agent runs in process) both need it.
package vzhost

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"einsora.dev/edge/drivers/vz"
	"einsora.dev/edge/internal/cli"
)

// Command is "vz-host --bundle DIR". The driver starts it in a session of
// its own; it is not for people to run.
func Command() *cobra.Command {
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
