package placement

import (
	"testing"

	"einsora.dev/edge/protocol"
)

// TestPlaceByEngine: the driver table decides what each Docker engine may
// run. Podman's Docker API runs containers with docker only; Docker Desktop
// runs what Docker does but not under runsc; an engine not named counts as
// Docker.
func TestPlaceByEngine(t *testing.T) {
	tests := []struct {
		engine     string
		kind       protocol.Kind
		wantDriver string // "" for no fit
	}{
		{"", protocol.KindContainer, "docker-sandbox"},
		{protocol.EngineDocker, protocol.KindNotebook, "docker-sandbox"},
		{protocol.EngineDockerDesktop, protocol.KindNotebook, "docker"},
		{protocol.EnginePodman, protocol.KindContainer, "docker"},
		{protocol.EnginePodman, protocol.KindNotebook, ""},
		{protocol.EnginePodman, protocol.KindEndpoint, ""},
	}
	for _, tt := range tests {
		t.Run(tt.engine+"_"+string(tt.kind), func(t *testing.T) {
			m := linux("m-1", "acme", "r", 0)
			m.Engine = tt.engine
			d, err := Place(wl("w", "acme", "r", tt.kind, "cpu-1"), class(t, "cpu-1"), []Machine{m}, DefaultDrivers)
			switch {
			case tt.wantDriver == "" && err == nil:
				t.Errorf("got %+v, want no fit", d)
			case tt.wantDriver != "" && (err != nil || d.Driver != tt.wantDriver):
				t.Errorf("got %+v, %v; want driver %s", d, err, tt.wantDriver)
			}
		})
	}
	inv := protocol.Inventory{Docker: &protocol.Docker{Version: "5.4.1", Kind: protocol.EnginePodman}}
	if EngineOf(inv) != protocol.EnginePodman || EngineOf(protocol.Inventory{}) != "" {
		t.Errorf("EngineOf: got %q and %q", EngineOf(inv), EngineOf(protocol.Inventory{}))
	}
}
