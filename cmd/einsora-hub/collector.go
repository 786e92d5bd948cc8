package main

import (
	"log/slog"
	"runtime/debug"
)

// hubGCPercent is the collector's target for a networked hub: the heap may
// grow by half its live size between collections, not by all of it (Go's
// default, GOGC=100). A hub's live heap is mostly its idle agents'
// connections, which live for hours, and at idle it allocates little, so
// the headroom a doubling gives is memory nobody uses: at 10,000 agents
// the hub's RSS was 33.3 KiB an agent at the idle window's end against
// 40.5 with the default, for CPU a change, wakes and bursts within their
// noise (docs/performance.md, "The collector's headroom").
const hubGCPercent = 50

// tuneCollector sets the collector's target to hubGCPercent, unless GOGC
// is set: an operator's choice is kept.
func tuneCollector(getenv func(string) string, log *slog.Logger) {
	if v := getenv("GOGC"); v != "" {
		log.Debug("the collector's target is the environment's", "GOGC", v)
		return
	}
	debug.SetGCPercent(hubGCPercent)
}
