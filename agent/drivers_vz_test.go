package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/drivers/vz"
)

// A build without the vz shim says so for the name vz, and auto never
// offers it.
func TestBuildDriversVZWithoutShim(t *testing.T) {
	if vz.Available {
		t.Skip("this build has the vz shim")
	}
	log := slog.New(slog.DiscardHandler)
	_, _, err := BuildDrivers(context.Background(), "vz", t.TempDir(), "m-1", clock.Real{}, log)
	if !errors.Is(err, ErrUnknownDriver) || !strings.Contains(err.Error(), "this build has no vz") {
		t.Fatalf("got %v, want ErrUnknownDriver saying this build has no vz", err)
	}
	host, closeAll, err := BuildDrivers(context.Background(), "auto", t.TempDir(), "m-1", clock.Real{}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if _, ok := host.Get(vz.Name); ok {
		t.Fatal("auto offered vz without the shim")
	}
}
