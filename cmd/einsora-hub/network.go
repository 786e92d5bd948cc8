package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/serve"
	"einsora.dev/edge/internal/cli"
)

func serveCmd() *cobra.Command {
	var opts serve.Options
	var verbose bool
	var format cli.LogFormat
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a networked hub: agents enrol and sync over HTTPS with mutual TLS",
		Long: `Run a networked hub. Agents enrol and sync over HTTPS (TLS 1.3, mutual TLS) on --listen;
the admin API listens on --admin, on loopback. On first start the hub makes its certificate
authority in --data. SIGINT or SIGTERM drains: waiting agents are told to reconnect (to
--drain-to, if set) before the hub exits.`,
		Args: cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Logger = newLogger(cmd.ErrOrStderr(), format, verbose)
			tuneCollector(os.Getenv, opts.Logger)
			opts.Version = version
			opts.Ready = func(adminURL, agentURL string) {
				fmt.Fprintf(cmd.OutOrStdout(), "einsora-hub serve: admin API on %s, agents connect to %s, data in %s\n", adminURL, agentURL, opts.DataDir)
				notifyReady(opts.Logger, adminURL, agentURL)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serve.Run(ctx, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.DataDir, "data", cli.DefaultHubDataDir(), "data directory (store, CA, admin token)")
	f.StringVar(&opts.Store, "store", "", "PostgreSQL URL (postgres://…) for several hub replicas; default SQLite in --data")
	f.DurationVar(&opts.Hub.LeaseTTL, "lease-ttl", 0, "how long the region's controller lease lasts unless renewed (default 15s)")
	f.StringVar(&opts.Listen, "listen", ":8443", "address agents connect to (HTTPS)")
	f.StringVar(&opts.AdminAddr, "admin", "127.0.0.1:7480", "address of the admin API; beyond loopback it needs --admin-tls-cert/--admin-tls-key or --admin-insecure")
	f.StringVar(&opts.AdminTLSCert, "admin-tls-cert", "", "PEM certificate (chain) the admin API serves HTTPS with; needs --admin-tls-key")
	f.StringVar(&opts.AdminTLSKey, "admin-tls-key", "", "PEM private key of --admin-tls-cert")
	f.BoolVar(&opts.AdminInsecure, "admin-insecure", false, "let the admin API serve plain HTTP beyond loopback, the admin token crossing the network in cleartext")
	f.StringArrayVar(&opts.Regions, "region", []string{"local"}, "region this hub leads, placing its workloads (repeatable; '*' leads every region that has a machine or a token); each has its own lease, so replicas can split regions")
	f.BoolVar(&opts.Hub.AllowSim, "allow-sim", false, "accept machines that offer the sim driver, which runs nothing (development and tests)")
	f.StringArrayVar(&opts.Names, "name", nil, "a host name or address agents use to reach the hub (repeatable); the server certificate holds it")
	f.StringVar(&opts.Hub.URL, "url", "", "this replica's own URL as agents reach it (https://HOST:PORT), not a load balancer's; replicas on one store publish it to each other")
	f.StringVar(&opts.DrainTo, "drain-to", "", "on shutdown, send waiting agents to this hub URL (https://HOST:PORT) instead of back here")
	f.DurationVar(&opts.Hub.PollTimeout, "poll-timeout", 0, "how long a sync is held when nothing changed (default 10m)")
	f.DurationVar(&opts.Hub.OfflineAfter, "offline-after", 0, "how long a machine may be silent and still be online; replicas write presence every third of it (default 45s)")
	f.DurationVar(&opts.Hub.OfflineFailAfter, "offline-fail-after", 0, "how long a machine may be silent before its running workloads fail and its stopping ones are stopped (default 10m)")
	f.DurationVar(&opts.ClientCertLifetime, "cert-lifetime", 0, "how long machines' certificates are valid (default 720h); agents renew at about 70%")
	f.BoolVar(&verbose, "verbose", false, "log debug messages")
	f.Var(&format, "log-format", "log as text or json (one object a line)")
	limitFlags(f, &opts.Limits)
	return cmd
}

// limitFlags tunes the hub's limits; 0 keeps a limit's default (which
// docs/operations.md lists, with the kind of caller each applies to).
func limitFlags(f *pflag.FlagSet, l *serve.Limits) {
	// Enrolled machines.
	f.Float64Var(&l.Rate, "machine-rate", 0, fmt.Sprintf("requests a second each machine may make (default %d)", serve.DefaultRate))
	f.IntVar(&l.Burst, "machine-burst", 0, fmt.Sprintf("requests a machine may make at once (default %d)", serve.DefaultBurst))
	f.IntVar(&l.MaxActive, "max-active", 0, "machines' requests the hub works on at once, waiting polls aside; the others wait their turn (default 256 per CPU)")
	f.IntVar(&l.MaxQueued, "max-queued", 0, fmt.Sprintf("machines' requests waiting their turn past --max-active; past it, 503 (default %d)", serve.DefaultMaxQueued))
	f.DurationVar(&l.QueueWait, "queue-wait", 0, fmt.Sprintf("longest a machine's request waits its turn before it is answered 503 (default %s)", serve.DefaultQueueWait))
	f.Float64Var(&l.ReconnectRate, "reconnect-rate", 0, fmt.Sprintf("machines a second the hub takes back after a restart or drain; sizes the window agents spread over (default %d per CPU)", serve.DefaultReconnectRatePerCPU))
	f.DurationVar(&l.MinReconnectWindow, "reconnect-window-min", 0, fmt.Sprintf("least reconnect window told to agents (default %s)", serve.DefaultMinReconnectWindow))
	f.DurationVar(&l.StartPhase, "start-phase", 0, "how long after start machines' requests past --reconnect-rate are queued with Retry-After (default: no queue)")
	// Unauthenticated callers (enrolment, renewal by token).
	f.Float64Var(&l.EnrollRate, "enroll-rate", 0, fmt.Sprintf("unauthenticated requests a second per source address or IPv6 /64 (default %d)", serve.DefaultEnrollRate))
	f.IntVar(&l.EnrollBurst, "enroll-burst", 0, fmt.Sprintf("unauthenticated requests a source may make at once (default %d)", serve.DefaultEnrollBurst))
	f.IntVar(&l.MaxAnonActive, "max-anon-active", 0, "unauthenticated requests in flight (default 32 per CPU)")
	f.DurationVar(&l.BodyTimeoutMin, "body-timeout-min", 0, fmt.Sprintf("least time an unauthenticated body may take to arrive (default %s)", serve.DefaultBodyTimeoutMin))
	f.IntVar(&l.BodyRate, "body-rate", 0, fmt.Sprintf("bytes a second an unauthenticated body must arrive at beyond --body-timeout-min (default %d)", serve.DefaultBodyRate))
	f.DurationVar(&l.BodyTimeoutMax, "body-timeout-max", 0, fmt.Sprintf("most time an unauthenticated body may take to arrive (default %s)", serve.DefaultBodyTimeoutMax))
	// Connections no certificate vouches for yet: every caller's, until its handshake ends.
	f.IntVar(&l.MaxHandshakes, "max-handshakes", 0, "TLS handshakes the hub computes at once; the others wait their turn (default 64 per CPU)")
	f.DurationVar(&l.HandshakeQueueWait, "handshake-queue-wait", 0, fmt.Sprintf("longest a handshake waits for its turn before it is refused (default %s)", serve.DefaultHandshakeQueueWait))
	f.DurationVar(&l.HandshakeTimeout, "handshake-timeout", 0, fmt.Sprintf("time a peer has to finish its TLS handshake (default %s)", serve.DefaultHandshakeTimeout))
	f.IntVar(&l.MaxUntrusted, "max-untrusted", 0, fmt.Sprintf("connections open without a verified client certificate, in all (default %d)", serve.DefaultMaxUntrusted))
	f.IntVar(&l.MaxUntrustedPerSource, "max-untrusted-per-source", 0, fmt.Sprintf("the same per source address or IPv6 /64 (default %d)", serve.DefaultMaxUntrustedPerSource))
	// The admin API.
	f.IntVar(&l.MaxAdminActive, "max-admin-active", 0, fmt.Sprintf("admin API requests in flight (default %d)", serve.DefaultMaxAdminActive))
	f.DurationVar(&l.AdminFailDelay, "admin-fail-delay", 0, fmt.Sprintf("hold on a source after a wrong admin token, doubled for each further one (default %s)", serve.DefaultAdminFailDelay))
	f.DurationVar(&l.AdminFailMax, "admin-fail-max", 0, fmt.Sprintf("longest hold on a source for wrong admin tokens (default %s)", serve.DefaultAdminFailMax))
	// All callers.
	f.DurationVar(&l.RetryAfter, "retry-after", 0, fmt.Sprintf("least Retry-After of a 503; up to 4 times as much is added at random (default %s)", serve.DefaultRetryAfter))
}

func tokenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Make enrolment tokens for agents"}
	var owner, region string
	var ttl time.Duration
	create := &cobra.Command{
		Use:   "create --owner TENANT --region REGION",
		Short: "Print a single-use enrolment token that fixes the machine's owner and region",
		Args:  cli.Args(cobra.NoArgs),
	}
	create.Flags().StringVar(&owner, "owner", "", "tenant that will own the machine")
	create.Flags().StringVar(&region, "region", "", "region the machine will serve")
	create.Flags().DurationVar(&ttl, "ttl", hub.DefaultTokenTTL, "how long the token may be used")
	create.MarkFlagRequired("owner")
	create.MarkFlagRequired("region")
	g.addJSON(create)
	create.RunE = run(g, func(ctx context.Context, c *adminapi.Client) error {
		if ttl < hub.MinTokenTTL || ttl > hub.MaxTokenTTL {
			return cli.Usagef("--ttl %s: want between %s and %s", ttl, hub.MinTokenTTL, hub.MaxTokenTTL)
		}
		t, err := c.CreateToken(ctx, owner, region, ttl)
		if err != nil || g.json {
			return orJSON(create, t, err)
		}
		fmt.Fprintln(create.OutOrStdout(), t.Token)
		warn(create, t.Warning)
		fmt.Fprintf(create.ErrOrStderr(), "single-use token for owner %s in region %s, valid until %s; on the machine run: einsora-agent enroll --hub https://HUB:8443 --token TOKEN\n",
			t.Owner, t.Region, t.Expires.Local().Format(time.RFC3339))
		return nil
	})
	cmd.AddCommand(create)
	return cmd
}

func machineRevokeCmd(g *globals) *cobra.Command {
	revoke := &cobra.Command{
		Use:   "revoke ID [--serial S]",
		Short: "Revoke a machine: its certificate is refused and its agent cut off at once; with --serial, only that certificate",
		Args:  cli.Args(cobra.ExactArgs(1)),
	}
	var serial string
	revoke.Flags().StringVar(&serial, "serial", "", "revoke only this certificate of the machine (see: einsora-hub machine show ID)")
	revoke.RunE = func(cmd *cobra.Command, args []string) error {
		return run(g, func(ctx context.Context, c *adminapi.Client) error {
			if serial != "" {
				return c.RevokeCertificate(ctx, args[0], serial)
			}
			return c.RevokeMachine(ctx, args[0])
		})(cmd, args)
	}
	return revoke
}

func machineRemoveCmd(g *globals) *cobra.Command {
	rm := &cobra.Command{
		Use:   "rm ID",
		Short: "Forget a machine that holds no workloads, so its ID may enrol again",
		Args:  cli.Args(cobra.ExactArgs(1)),
	}
	rm.RunE = func(cmd *cobra.Command, args []string) error {
		return run(g, func(ctx context.Context, c *adminapi.Client) error { return c.RemoveMachine(ctx, args[0]) })(cmd, args)
	}
	return rm
}
