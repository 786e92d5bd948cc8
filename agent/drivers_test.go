package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"

	"einsora.dev/edge/clock"
)

func TestBuildDrivers(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	host, closeAll, err := BuildDrivers(context.Background(), "sim, macos-native", t.TempDir(), "m-1", clock.Real{}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if got := host.Names(); !slices.Equal(got, []string{"macos-native", "sim"}) {
		t.Errorf("got drivers %v", got)
	}
	for _, list := range []string{"vmware", "sim,nope"} {
		if _, _, err := BuildDrivers(context.Background(), list, t.TempDir(), "m-1", clock.Real{}, log); !errors.Is(err, ErrUnknownDriver) {
			t.Errorf("%q: got %v, want ErrUnknownDriver", list, err)
		}
	}
	if _, _, err := BuildDrivers(context.Background(), " , ", t.TempDir(), "m-1", clock.Real{}, log); err == nil {
		t.Error("an empty list built a host")
	}
}
