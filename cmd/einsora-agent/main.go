// Command einsora-agent is the node agent: it syncs with a hub and runs the
// workloads placed on this machine.
package main

import (
	"os"

	"einsora.dev/edge/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	os.Exit(cli.Exec(newRoot(), os.Stderr))
}
