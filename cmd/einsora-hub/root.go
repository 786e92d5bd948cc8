package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/solo"
	"einsora.dev/edge/internal/cli"
	"einsora.dev/edge/internal/vzhost"
)

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "einsora-hub",
		Short: "The Einsora hub: stores intent, places workloads, answers agents",
	}
	root.AddCommand(soloCmd(), serveCmd(), versionCmd())
	root.AddCommand(vzhost.Command())
	g := &globals{}
	for _, c := range []*cobra.Command{tenantCmd(g), tokenCmd(g), classCmd(g), machineCmd(g), workloadCmd(g), certCmd(g), dashboardCmd(g)} {
		c.PersistentFlags().StringVar(&g.hub, "hub", envOr("EINSORA_HUB", "http://127.0.0.1:7480"), "admin API of the hub (env EINSORA_HUB)")
		c.PersistentFlags().StringVar(&g.data, "data", cli.DefaultHubDataDir(), "the hub's data directory, which holds the admin token")
		root.AddCommand(c)
	}
	root.AddCommand(cli.GenDocsCmd(root, version))
	return root
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func versionCmd() *cobra.Command {
	return &cobra.Command{Use: "version", Short: "Print the version", Args: cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), version)
			return nil
		}}
}

func soloCmd() *cobra.Command {
	var opts solo.Options
	var verbose bool
	var format cli.LogFormat
	cmd := &cobra.Command{
		Use:   "solo",
		Short: "Run the hub and an agent for this machine in one process (owner local, region local)",
		Args:  cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Logger = newLogger(cmd.ErrOrStderr(), format, verbose)
			opts.Version = version
			opts.Ready = func(url string) {
				fmt.Fprintf(cmd.OutOrStdout(), "einsora-hub solo: admin API on %s, data in %s\n", url, opts.DataDir)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return solo.Run(ctx, opts)
		},
	}
	cmd.Flags().StringVar(&opts.DataDir, "data", cli.DefaultHubDataDir(), "data directory (store, admin token, agent state)")
	cmd.Flags().StringVar(&opts.AdminAddr, "admin", "127.0.0.1:7480", "address of the admin API; beyond loopback it needs --admin-insecure")
	cmd.Flags().BoolVar(&opts.AdminInsecure, "admin-insecure", false, "let the admin API listen beyond loopback, the admin token crossing the network in cleartext")
	cmd.Flags().StringVar(&opts.Drivers, "drivers", "auto", "drivers the in-process agent offers: sim, docker, docker-sandbox, macos-native, or auto (every real runtime that answers; never sim)")
	cmd.Flags().DurationVar(&opts.Hub.PollTimeout, "poll-timeout", 0, "how long a sync is held when nothing changed (default 10m)")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "log debug messages")
	cmd.Flags().Var(&format, "log-format", "log as text or json (one object a line)")
	return cmd
}

// newLogger logs to w in format, debug messages too when verbose.
func newLogger(w io.Writer, format cli.LogFormat, verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return format.Logger(w, level)
}

type globals struct {
	hub, data string
	json      bool
}

func (g *globals) client() (*adminapi.Client, error) {
	token := os.Getenv("EINSORA_ADMIN_TOKEN")
	if token == "" {
		path := filepath.Join(g.data, solo.AdminTokenFile)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read admin token: %w (point --data at the hub's data directory, or set EINSORA_ADMIN_TOKEN)", err)
		}
		token = strings.TrimSpace(string(b))
	}
	return &adminapi.Client{BaseURL: g.hub, Token: token}, nil
}

func (g *globals) addJSON(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&g.json, "json", false, "print JSON only")
}

func run(g *globals, fn func(ctx context.Context, c *adminapi.Client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
		defer cancel()
		return fn(ctx, c)
	}
}

func table(cmd *cobra.Command, header string, rows [][]string) {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

func tenantCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "tenant", Short: "Manage tenants"}
	create := &cobra.Command{Use: "create NAME", Short: "Add a tenant", Args: cli.Args(cobra.ExactArgs(1))}
	create.RunE = func(cmd *cobra.Command, args []string) error {
		return run(g, func(ctx context.Context, c *adminapi.Client) error { return c.CreateTenant(ctx, args[0]) })(cmd, args)
	}
	ls := &cobra.Command{Use: "ls", Short: "List tenants", Args: cli.Args(cobra.NoArgs)}
	g.addJSON(ls)
	ls.RunE = run(g, func(ctx context.Context, c *adminapi.Client) error {
		ts, err := c.Tenants(ctx)
		if err != nil || g.json {
			return orJSON(ls, ts, err)
		}
		plain(ts)
		rows := make([][]string, len(ts))
		for i, t := range ts {
			rows[i] = []string{t.Name, t.Created.Format(time.RFC3339)}
		}
		table(ls, "NAME\tCREATED", rows)
		return nil
	})
	cmd.AddCommand(create, ls)
	return cmd
}

// orJSON prints v as JSON unless err is set.
func orJSON(cmd *cobra.Command, v any, err error) error {
	if err != nil {
		return err
	}
	return cli.PrintJSON(cmd.OutOrStdout(), v)
}

func classCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "class", Short: "Manage classes (sizes of workload)"}
	ls := &cobra.Command{Use: "ls", Short: "List classes", Args: cli.Args(cobra.NoArgs)}
	g.addJSON(ls)
	ls.RunE = run(g, func(ctx context.Context, c *adminapi.Client) error {
		cs, err := c.Classes(ctx)
		if err != nil || g.json {
			return orJSON(ls, cs, err)
		}
		plain(cs)
		rows := make([][]string, len(cs))
		for i, c := range cs {
			rows[i] = []string{c.Name, c.Accelerator, fmt.Sprint(c.Devices), fmt.Sprint(c.CPUs), fmt.Sprint(c.MemoryMB)}
		}
		table(ls, "NAME\tACCELERATOR\tDEVICES\tCPUS\tMEMORY_MB", rows)
		return nil
	})
	var cl adminapi.Class
	create := &cobra.Command{Use: "create NAME", Short: "Add or replace a class", Args: cli.Args(cobra.ExactArgs(1))}
	create.Flags().StringVar(&cl.Accelerator, "accelerator", "none", "none, apple-gpu, nvidia-gpu or amd-gpu")
	create.Flags().IntVar(&cl.Devices, "devices", 0, "accelerator devices it reserves")
	create.Flags().IntVar(&cl.CPUs, "cpus", 1, "CPUs it reserves")
	create.Flags().IntVar(&cl.MemoryMB, "memory-mb", 2048, "memory it reserves, in MB")
	create.RunE = func(cmd *cobra.Command, args []string) error {
		cl.Name = args[0]
		return run(g, func(ctx context.Context, c *adminapi.Client) error { return c.CreateClass(ctx, cl) })(cmd, args)
	}
	cmd.AddCommand(ls, create)
	return cmd
}

func machineCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "machine", Short: "See and manage machines"}
	ls := &cobra.Command{Use: "ls", Short: "List machines and their health", Args: cli.Args(cobra.NoArgs)}
	g.addJSON(ls)
	ls.RunE = run(g, func(ctx context.Context, c *adminapi.Client) error {
		ms, err := c.Machines(ctx)
		if err != nil || g.json {
			return orJSON(ls, ms, err)
		}
		plain(ms)
		rows := make([][]string, len(ms))
		for i, m := range ms {
			last := "never"
			if m.LastSync != nil {
				last = m.LastSync.Format(time.RFC3339)
			}
			rows[i] = []string{m.ID, m.Name, m.Owner, m.Region, machineState(m), last,
				fmt.Sprintf("%d/%d", m.AppliedGeneration, m.DesiredGeneration), agentColumn(m.AgentVersion, version), simMark(m), certExpiry(m)}
		}
		table(ls, "ID\tNAME\tOWNER\tREGION\tSTATE\tLAST_SYNC\tAPPLIED/DESIRED\tAGENT\tSIM\tCERT_EXPIRES", rows)
		return nil
	})
	show := &cobra.Command{Use: "show ID", Short: "Show a machine, its inventory and drivers", Args: cli.Args(cobra.ExactArgs(1))}
	g.addJSON(show)
	show.RunE = func(cmd *cobra.Command, args []string) error {
		return run(g, func(ctx context.Context, c *adminapi.Client) error {
			m, err := c.Machine(ctx, args[0])
			if err != nil || g.json {
				return orJSON(show, m, err)
			}
			plain(&m)
			out := show.OutOrStdout()
			fmt.Fprintf(out, "id:          %s\nname:        %s\nowner:       %s\nregion:      %s\nstate:       %s\n", m.ID, m.Name, m.Owner, m.Region, machineState(m))
			if m.RevokedAt != nil {
				fmt.Fprintf(out, "revoked_at:  %s\n", m.RevokedAt.Format(time.RFC3339))
			}
			if m.Sim {
				fmt.Fprintf(out, "sim:         true (the sim driver runs nothing)\n")
			}
			fmt.Fprintf(out, "generation:  applied %d of %d\nagent:       %s\nplatform:    %s/%s\ndrivers:     %s\n",
				m.AppliedGeneration, m.DesiredGeneration, m.AgentVersion, m.OS, m.Arch, strings.Join(m.Drivers, ", "))
			if m.Inventory != nil {
				fmt.Fprintf(out, "cpus:        %d\nmemory_mb:   %d\ngpus:        %d\n", m.Inventory.CPUs, m.Inventory.MemoryMB, len(m.Inventory.GPUs))
			}
			if m.CertExpires != nil {
				fmt.Fprintf(out, "cert:        expires %s\n", m.CertExpires.Format(time.RFC3339))
			}
			printCertificates(out, m.Certificates)
			return nil
		})(cmd, args)
	}
	cmd.AddCommand(ls, show, machineRevokeCmd(g), machineRemoveCmd(g), machineReplaceCmd(g))
	return cmd
}

func workloadCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "workload", Short: "Manage workloads"}

	var cw adminapi.CreateWorkload
	create := &cobra.Command{Use: "create", Short: "Create a workload, or those a file lists (--file); prints their IDs", Args: cli.Args(cobra.NoArgs),
		Long: `Create a workload from flags (--tenant, --name, --kind, --class and --region
are needed), or every workload a JSON file lists with --file: an array of
objects, or one object a line, each with the fields tenant, name, kind, class,
region, image, command, env, secret_env, ports, workdir, volumes and restart.
A file's workloads are sent up to 1,000 to a call, each call all or none; the
IDs are printed in the file's order.`}
	create.Flags().StringVar(&cw.Tenant, "tenant", "", "tenant that owns it")
	create.Flags().StringVar(&cw.Name, "name", "", "its name")
	create.Flags().StringVar(&cw.Kind, "kind", "", "container, vm, notebook or endpoint")
	create.Flags().StringVar(&cw.Class, "class", "", "its class (see: einsora-hub class ls)")
	create.Flags().StringVar(&cw.Region, "region", "", "region it runs in")
	create.Flags().StringVar(&cw.Image, "image", "", "image it runs")
	var file string
	create.Flags().StringVarP(&file, "file", "f", "", `create the workloads this JSON file lists ("-": standard input), instead of one from flags`)
	var sf specFlags
	sf.add(create)
	runCreate := run(g, func(ctx context.Context, c *adminapi.Client) error {
		if err := checkKind(cw.Kind); err != nil {
			return &cli.UsageError{Err: err}
		}
		spec, err := sf.spec()
		if err != nil {
			return err
		}
		cw.WorkloadSpec = spec
		w, err := c.CreateWorkload(ctx, cw)
		if err != nil {
			return err
		}
		fmt.Fprintln(create.OutOrStdout(), w.ID)
		warn(create, w.Warning)
		return nil
	})
	create.RunE = func(cmd *cobra.Command, args []string) error {
		if file != "" {
			var set []string
			cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
				if f.Name != "file" && cmd.Flags().Changed(f.Name) {
					set = append(set, "--"+f.Name)
				}
			})
			if len(set) > 0 {
				return cli.Usagef("--file takes each workload from the file: drop %s", strings.Join(set, ", "))
			}
			return createFromFile(cmd, g, file)
		}
		var missing []string
		for _, f := range createRequired {
			if !cmd.Flags().Changed(f) {
				missing = append(missing, `"`+f+`"`)
			}
		}
		if len(missing) > 0 {
			return cli.Usagef("required flag(s) %s not set (or give --file)", strings.Join(missing, ", "))
		}
		return runCreate(cmd, args)
	}

	ls := &cobra.Command{Use: "ls", Short: "List workloads", Args: cli.Args(cobra.NoArgs)}
	g.addJSON(ls)
	ls.RunE = run(g, func(ctx context.Context, c *adminapi.Client) error {
		ws, err := c.Workloads(ctx)
		if err != nil || g.json {
			return orJSON(ls, ws, err)
		}
		plain(ws)
		rows := make([][]string, len(ws))
		for i, w := range ws {
			rows[i] = []string{w.ID, w.Name, w.Tenant, w.Kind, w.Class, workloadState(w), w.Machine, w.Driver, fmt.Sprint(w.Attempt)}
		}
		table(ls, "ID\tNAME\tTENANT\tKIND\tCLASS\tSTATE\tMACHINE\tDRIVER\tATTEMPT", rows)
		return nil
	})

	show := &cobra.Command{Use: "show ID", Short: "Show a workload", Args: cli.Args(cobra.ExactArgs(1))}
	g.addJSON(show)
	show.RunE = func(cmd *cobra.Command, args []string) error {
		return run(g, func(ctx context.Context, c *adminapi.Client) error {
			w, err := c.Workload(ctx, args[0])
			if err != nil || g.json {
				return orJSON(show, w, err)
			}
			plain(&w)
			fmt.Fprintf(show.OutOrStdout(), "id:       %s\nname:     %s\ntenant:   %s\nkind:     %s\nclass:    %s\nregion:   %s\nimage:    %s\nstate:    %s\nmachine:  %s\ndriver:   %s\nattempt:  %d\nreason:   %s\n",
				w.ID, w.Name, w.Tenant, w.Kind, w.Class, w.Region, w.Image, workloadState(w), w.Machine, w.Driver, w.Attempt, w.Reason)
			printSpec(show.OutOrStdout(), w)
			return nil
		})(cmd, args)
	}

	for _, verb := range []struct{ name, short string }{
		{"run", "Run a stopped or failed workload again (a new attempt)"},
		{"park", "Stop a workload, keeping its data"},
		{"rm", "Delete a workload and its data"},
	} {
		c := &cobra.Command{Use: verb.name + " ID", Short: verb.short, Args: cli.Args(cobra.ExactArgs(1))}
		c.RunE = func(cmd *cobra.Command, args []string) error {
			return run(g, func(ctx context.Context, cl *adminapi.Client) error { return cl.Act(ctx, args[0], verb.name) })(cmd, args)
		}
		cmd.AddCommand(c)
	}

	tl := &cobra.Command{Use: "timeline ID", Short: "Show a workload's history", Args: cli.Args(cobra.ExactArgs(1))}
	g.addJSON(tl)
	tl.RunE = func(cmd *cobra.Command, args []string) error {
		return run(g, func(ctx context.Context, c *adminapi.Client) error {
			es, err := c.Timeline(ctx, args[0])
			if err != nil || g.json {
				return orJSON(tl, es, err)
			}
			plain(es)
			for _, e := range es {
				fmt.Fprintf(tl.OutOrStdout(), "%s  %s\n", e.At.Format(time.RFC3339), e.Text)
			}
			return nil
		})(cmd, args)
	}

	var state string
	var timeout time.Duration
	wait := &cobra.Command{Use: "wait ID --state S", Short: "Wait until a workload reaches a state; exit 1 on timeout", Args: cli.Args(cobra.ExactArgs(1))}
	wait.Flags().StringVar(&state, "state", "", "the state to wait for (gone waits for deletion)")
	wait.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "how long to wait")
	wait.MarkFlagRequired("state")
	wait.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		return waitState(cmd, c, args[0], state, timeout)
	}

	cmd.AddCommand(create, ls, show, tl, wait, logsCmd(g))
	return cmd
}

// waitState polls until the workload is in state, printing each state it
// passes through on stderr so long waits show progress.
func waitState(cmd *cobra.Command, c *adminapi.Client, id, state string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	last := ""
	for {
		w, err := c.Workload(ctx, id)
		switch {
		case state == "gone" && adminapi.NotFound(err):
			return nil
		case err != nil && ctx.Err() == nil:
			return err
		case err == nil && w.State == state:
			return nil
		case err == nil && w.State != last:
			last = w.State
			msg := w.State
			if w.Reason != "" {
				msg += ": " + w.Reason
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s is %s\n", id, msg)
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("workload %s did not reach %s within %s (it is %s)", id, state, timeout, last)
			}
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
