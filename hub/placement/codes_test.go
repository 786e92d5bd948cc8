package placement

import (
	"errors"
	"testing"
)

// Every stage has its own bounded code, and Place sets it.
func TestNoFitCodes(t *testing.T) {
	if len(Codes) != int(stageFits) {
		t.Fatalf("%d codes for %d stages", len(Codes), stageFits)
	}
	seen := map[string]bool{}
	for s := stageHost; s < stageFits; s++ {
		if seen[s.code()] {
			t.Errorf("stage %d repeats code %s", s, s.code())
		}
		seen[s.code()] = true
	}
	_, err := Place(Workload{ID: "w", Tenant: "acme", Region: "eu", Kind: "container"}, Class{Name: "cpu-1", CPUs: 1, MemoryMB: 512}, nil, DefaultDrivers)
	var nf *NoFit
	if !errors.As(err, &nf) || nf.Code != "no_machine" {
		t.Fatalf("got %v (%+v), want a NoFit coded no_machine", err, nf)
	}
}
