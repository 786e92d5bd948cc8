package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"einsora.dev/edge/hub"
)

// WatchBounds registers the counters of what the hub refused or bounded of
// agents' input (issue 14), read from counters at each scrape. Call it
// once.
func (m *Hub) WatchBounds(counters func() hub.Counters) {
	for _, c := range []struct {
		name, help string
		read       func(hub.Counters) int64
	}{
		{"einsora_hub_statuses_dropped_total", "Statuses of workloads not placed on the machine that reported them, dropped unstored.",
			func(c hub.Counters) int64 { return c.DroppedStatuses }},
		{"einsora_hub_statuses_stale_total", "Stored statuses deleted because their workload is no longer placed on the machine.",
			func(c hub.Counters) int64 { return c.StaleStatuses }},
		{"einsora_hub_timeline_lines_dropped_total", "Oldest timeline lines dropped past the timeline bound.",
			func(c hub.Counters) int64 { return c.TimelineLinesDropped }},
		{"einsora_hub_timeline_lines_retired_total", "Timeline lines of removed workloads deleted after the retention.",
			func(c hub.Counters) int64 { return c.TimelineLinesRetired }},
		{"einsora_hub_capacity_view_misses_total", "Machines a leading controller's capacity view had wrong at its periodic full check.",
			func(c hub.Counters) int64 { return c.CapacityViewMisses }},
	} {
		read := c.read
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help},
			func() float64 { return float64(read(counters())) }))
	}
}
