package main

import (
	"context"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"einsora.dev/edge/agent"
	"einsora.dev/edge/internal/dockerhost"
	"einsora.dev/edge/inventory"
)

// dockerHostUsage is the --docker-host flag's help.
const dockerHostUsage = "Docker Engine endpoint for the inventory and the docker drivers (unix:///PATH or tcp://HOST:PORT); " +
	"default: DOCKER_HOST, the current docker context, then the Docker Desktop, Colima, rootless and system sockets"

func addDockerHostFlag(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "docker-host", "", dockerHostUsage)
}

// inventoryOptions are the inventory's options on the endpoint chosen once:
// a default endpoint is left to the prober, so that a machine without
// Docker gets no note.
func inventoryOptions(ep dockerhost.Endpoint) inventory.Options {
	var o inventory.Options
	if !ep.Default {
		o.DockerHost = ep.Host
	}
	return o
}

// dockerHostCheck is doctor's check naming the endpoint and why it was
// chosen; a unix socket that is not there is a warning.
func dockerHostCheck(ep dockerhost.Endpoint) func(context.Context) agent.Check {
	return func(context.Context) agent.Check {
		c := agent.Check{Name: "docker endpoint", Verdict: agent.OK, Detail: ep.Host + " (" + ep.Why + ")"}
		if path, ok := strings.CutPrefix(ep.Host, "unix://"); ok {
			if _, err := os.Stat(path); err != nil {
				c.Verdict = agent.Warn
				c.Detail += ": no socket there"
				c.Fix = "start Docker, or name the engine: --docker-host unix://$HOME/.docker/run/docker.sock (Docker Desktop), " +
					"unix://$HOME/.colima/default/docker.sock (Colima), or docker_host in the config file"
			}
		}
		return c
	}
}
