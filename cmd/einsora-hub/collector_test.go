package main

import (
	"io"
	"log/slog"
	"runtime/debug"
	"testing"
)

// gcPercent is the collector's target in force.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// A networked hub runs its collector at hubGCPercent, unless the operator
// set GOGC, which is kept.
func TestServeCollectorTargetUnlessGOGCIsSet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	tuneCollector(func(string) string { return "" }, log)
	if got := gcPercent(); got != hubGCPercent {
		t.Errorf("without GOGC: the collector's target is %d, want %d", got, hubGCPercent)
	}

	debug.SetGCPercent(150) // as GOGC=150 had set it at start
	tuneCollector(func(k string) string {
		if k == "GOGC" {
			return "150"
		}
		return ""
	}, log)
	if got := gcPercent(); got != 150 {
		t.Errorf("with GOGC=150: the collector's target is %d, want the operator's 150", got)
	}
}
