package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/internal/cli"
)

func machineReplaceCmd(g *globals) *cobra.Command {
	replace := &cobra.Command{
		Use:   "replace ID",
		Short: "Revoke a machine's certificates and let its next enrolment through (a new agent for the same machine)",
		Long: "The hub refuses to enrol a machine ID that holds a live certificate, so that no second party " +
			"takes over a machine with another token of its owner. replace revokes the machine's certificates " +
			"(whoever holds them is refused at once) and lets the next enrolment of the ID through; the machine " +
			"keeps its owner and workloads.",
		Args: cli.Args(cobra.ExactArgs(1)),
	}
	replace.RunE = func(cmd *cobra.Command, args []string) error {
		return run(g, func(ctx context.Context, c *adminapi.Client) error { return c.ReplaceMachine(ctx, args[0]) })(cmd, args)
	}
	return replace
}

func certCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "cert", Short: "Manage machines' certificates"}
	revoke := &cobra.Command{
		Use:   "revoke SERIAL",
		Short: "Revoke one certificate by its serial (see: einsora-hub machine show ID)",
		Args:  cli.Args(cobra.ExactArgs(1)),
	}
	revoke.RunE = func(cmd *cobra.Command, args []string) error {
		return run(g, func(ctx context.Context, c *adminapi.Client) error { return c.RevokeCertificate(ctx, "", args[0]) })(cmd, args)
	}
	cmd.AddCommand(revoke)
	return cmd
}

// printCertificates lists a machine's certificates under machine show.
func printCertificates(out io.Writer, cs []adminapi.Certificate) {
	if len(cs) == 0 {
		return
	}
	fmt.Fprintln(out, "certificates:")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SERIAL\tISSUED\tEXPIRES\tREVOKED")
	for _, c := range cs {
		revoked := "-"
		if c.Revoked != nil {
			revoked = c.Revoked.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Serial, c.Issued.Format(time.RFC3339), c.Expires.Format(time.RFC3339), revoked)
	}
	tw.Flush()
}
