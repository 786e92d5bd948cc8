package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/clock"
	"einsora.dev/edge/internal/cli"
	"einsora.dev/edge/internal/dockerhost"
	"einsora.dev/edge/inventory"
)

func doctorCmd() *cobra.Command {
	var stateDir, driverList, dockerHost, bundleDir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Diagnose this machine's agent: checks with ok, warn or fail and a fix for each; exit 1 when any fails",
		Args:  cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			log := slog.New(slog.DiscardHandler)
			ep := dockerhost.Resolve(dockerhost.FromOS(dockerHost))
			cfg := agent.DoctorConfig{StateDir: stateDir, Inventory: inventory.New(inventoryOptions(ep)).Probe,
				Extra: append(doctorExtras(stateDir), dockerHostCheck(ep))}
			// auto makes every real runtime whether it answers or not, so
			// one that is down shows as a warning, and none answering as
			// a failure. Drivers are made only in a state directory that
			// exists: the doctor creates nothing.
			if _, err := os.Stat(stateDir); err == nil {
				st, _ := agent.ReadStatus(stateDir)
				if host, closeDrivers, err := agent.BuildDriversOn(ctx, driverList, stateDir, st.MachineID, ep.Host, clock.Real{}, log); err == nil {
					defer closeDrivers()
					cfg.Drivers = host
				}
			}
			checks := agent.Doctor(ctx, cfg)
			if bundleDir != "" {
				if err := writeBundle(ctx, bundleDir, inventory.New(inventoryOptions(ep)), checks); err != nil {
					return err
				}
			}
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
	cmd.Flags().StringVar(&driverList, "drivers", "auto", "drivers to check, as the agent's --drivers")
	addDockerHostFlag(cmd, &dockerHost)
	cmd.Flags().StringVar(&bundleDir, "bundle", "", "also write the checks and an inventory capture (inventory --capture) to this directory, for a bug report")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON only")
	return cmd
}

// doctorExtras are the checks of enrolment, the certificate and the hub.
func doctorExtras(stateDir string) []func(context.Context) agent.Check {
	e, err := agent.ReadEnrollment(stateDir)
	if err != nil {
		return []func(context.Context) agent.Check{func(context.Context) agent.Check {
			return agent.Check{Name: "enrolment", Verdict: agent.Warn, Detail: "not enrolled",
				Fix: "einsora-agent enroll --hub https://HOST:8443 --token TOKEN (a token from: einsora-hub token create)"}
		}}
	}
	return []func(context.Context) agent.Check{
		func(context.Context) agent.Check {
			return agent.Check{Name: "enrolment", Verdict: agent.OK,
				Detail: fmt.Sprintf("with %s as machine %s of %s in %s", e.HubURL, e.MachineID, e.Owner, e.Region)}
		},
		func(context.Context) agent.Check { return checkCertificate(stateDir) },
		func(ctx context.Context) agent.Check { return checkHubReachable(ctx, e.HubURL) },
	}
}

func checkCertificate(stateDir string) agent.Check {
	c := agent.Check{Name: "certificate"}
	b, err := os.ReadFile(filepath.Join(stateDir, agent.CertFile))
	block, _ := pem.Decode(b)
	if err != nil || block == nil {
		c.Verdict, c.Detail, c.Fix = agent.Fail, "cannot read "+agent.CertFile, "enrol the machine again"
		return c
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		c.Verdict, c.Detail, c.Fix = agent.Fail, err.Error(), "enrol the machine again"
		return c
	}
	left := time.Until(leaf.NotAfter)
	c.Detail = "expires " + leaf.NotAfter.UTC().Format(time.RFC3339)
	switch {
	case left <= 0:
		c.Verdict, c.Fix = agent.Fail, "check this machine's clock; if it is right, enrol the machine again"
	case left < 7*24*time.Hour:
		c.Verdict, c.Fix = agent.Warn, "the running agent renews it; if it does not, see its log for why"
	default:
		c.Verdict = agent.OK
	}
	return c
}

// checkHubReachable dials the hub: the agent connects outbound only, so a
// firewall or a proxy in the way shows here.
func checkHubReachable(ctx context.Context, hubURL string) agent.Check {
	c := agent.Check{Name: "hub reachable"}
	u, err := url.Parse(hubURL)
	if err != nil || u.Host == "" {
		c.Verdict, c.Detail, c.Fix = agent.Fail, "bad hub URL "+hubURL, "enrol the machine again"
		return c
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		c.Verdict, c.Detail = agent.Fail, err.Error()
		c.Fix = "let this machine connect out to " + host + " over TCP (no inbound port is needed)"
		return c
	}
	conn.Close()
	c.Verdict, c.Detail = agent.OK, host+" answers"
	return c
}
