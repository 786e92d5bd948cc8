package vzhost

import (
	"errors"
	"io"
	"strings"
	"testing"

	"einsora.dev/edge/drivers/vz"
	"einsora.dev/edge/internal/cli"
)

func TestCommand(t *testing.T) {
	cmd := Command()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(nil)
	var usage *cli.UsageError
	if err := cmd.Execute(); !errors.As(err, &usage) {
		t.Fatalf("without --bundle: %v, want a usage error", err)
	}
	if vz.Available {
		t.Skip("this build has the shim")
	}
	cmd = Command()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"--bundle", t.TempDir()})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "no Virtualization.framework support") {
		t.Fatalf("got %v, want this build has no Virtualization.framework support", err)
	}
}
