package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/internal/cli"
	"einsora.dev/edge/protocol"
)

func enrollCmd() *cobra.Command {
	var opts agent.EnrollOptions
	cmd := &cobra.Command{
		Use:   "enroll --hub https://HOST:8443 --token TOKEN",
		Short: "Enrol this machine with a hub, using a token from `einsora-hub token create`",
		Long: `Enrol this machine with a hub. The agent makes its key (it never leaves this machine),
checks that the hub holds the certificate authority named in the token before it sends
anything, and saves the certificate the hub issues in the state directory. Then start the
agent with: einsora-agent run`,
		Args: cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := protocol.ParseToken(opts.Token); err != nil {
				return &cli.UsageError{Err: fmt.Errorf("--token: %w", err)}
			}
			if _, err := hubclient.ParseHubURL(opts.HubURL); err != nil {
				return &cli.UsageError{Err: fmt.Errorf("--hub: %w", err)}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			e, err := agent.Enroll(ctx, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "enrolled machine %s with %s (owner %s, region %s); certificate valid until %s\nstart the agent with: einsora-agent run --state-dir %s\n",
				e.MachineID, e.HubURL, e.Owner, e.Region, e.CertExpires.Local().Format(time.RFC3339), opts.StateDir)
			return nil
		},
	}
	cmd.Flags().StringVar(&opts.HubURL, "hub", "", "the hub's agent URL, https://HOST:PORT")
	cmd.Flags().StringVar(&opts.Token, "token", "", "the enrolment token")
	cmd.Flags().StringVar(&opts.StateDir, "state-dir", cli.DefaultAgentStateDir(), "state directory: machine ID, key and certificate, lock")
	cmd.Flags().StringVar(&opts.Name, "name", "", "name the hub shows for this machine (default: its host name)")
	cmd.MarkFlagRequired("hub")
	cmd.MarkFlagRequired("token")
	return cmd
}
