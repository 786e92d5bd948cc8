// Command fleetbench measures einsora-hub serve with N simulated agents,
// beside a stock Go TLS long-poll server: make bench-fleet N=1000. See
// docs/performance.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/internal/fleetbench"
)

func main() {
	// Started again by itself as the baseline server.
	if dir := os.Getenv(fleetbench.BaselineEnv); dir != "" {
		if err := fleetbench.ServeBaseline(dir); err != nil {
			fmt.Fprintln(os.Stderr, "fleetbench baseline:", err)
			os.Exit(1)
		}
		return
	}
	var cfg fleetbench.Config
	flag.IntVar(&cfg.N, "n", 1000, "simulated agents")
	flag.StringVar(&cfg.HubBin, "hub", "bin/einsora-hub", "the einsora-hub binary to measure")
	flag.DurationVar(&cfg.Window, "window", hub.DefaultPollTimeout, "how long idle CPU and traffic are measured: at least the hub's poll hold (10m), so every agent polls in it (the baseline's 25 s holds divide it)")
	flag.IntVar(&cfg.Changes, "changes", 60, "single-workload changes measured (create, park, run cycles)")
	flag.DurationVar(&cfg.ChangeEvery, "change-every", 0, "start the changes this far apart, as a steady flow would come (0: each as soon as the last is woken)")
	flag.IntVar(&cfg.BurstBatch, "burst-batch", adminapi.MaxCreateBatch, "workloads the burst creates per admin call (POST /v1/workloads/batch), 1 to 1000; 1: a call each, 16 at a time, as before the batch call")
	keep := flag.Bool("keep", false, "keep the hub's data directory and logs")
	flag.BoolVar(&cfg.HTTP1, "http1", false, "agents offer only HTTP/1.1, to compare the servers' memory per held poll (default: both, as an agent alone does, and each server chooses)")
	flag.BoolVar(&cfg.HTTP2, "http2", false, "agents offer only HTTP/2, as an agent with replicas does, to compare the servers' memory per held poll")
	flag.BoolVar(&cfg.Park, "park", false, "also measure the baseline parking its held polls: each poll's connection taken from net/http (HTTP/1.1) while held, no goroutine on it")
	flag.IntVar(&cfg.Replicas, "replicas", 1, "above 1: also measure that many einsora-hub serve replicas on one PostgreSQL database, agents spread over them, and one hub on that database")
	flag.StringVar(&cfg.Store, "store", "", "PostgreSQL URL (postgres://…) for the hubs, each run in a schema of its own; default with -replicas: a throwaway server from /usr/lib/postgresql/*/bin; else SQLite")
	flag.DurationVar(&cfg.HandshakeTimeout, "handshake-timeout", 10*time.Second, "the hubs' --handshake-timeout (0: the hub's default, 2s): this process's agents share the hub's cores, so past a few thousand at once they answer a handshake later than real agents, each on its own CPU")
	flag.DurationVar(&cfg.Rebalance, "rebalance", time.Minute, "with -replicas: how long after the restart the agents per replica are counted again, as the replicas even them out (0: not)")
	flag.DurationVar(&cfg.ConnectLimit, "connect-limit", 10*time.Minute, "how long the cold connect and the restart may take (at most 1h)")
	flag.Func("hub-flag", "one more flag for every hub of the run, not the baseline (repeat it: -hub-flag --reconnect-rate=1000)", func(v string) error {
		cfg.HubFlags = append(cfg.HubFlags, v)
		return nil
	})
	flag.Parse()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
	cfg.Self = self
	cfg.Out = os.Stdout
	cfg.Dir, err = os.MkdirTemp("", "fleetbench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err = fleetbench.Run(ctx, cfg)
	stop()
	if *keep || err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench: data and logs in", cfg.Dir)
	} else {
		os.RemoveAll(cfg.Dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
