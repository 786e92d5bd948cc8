// Command einsora-hub is the hub: `solo` runs it with an in-process agent,
// and the admin verbs reach a running hub.
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
