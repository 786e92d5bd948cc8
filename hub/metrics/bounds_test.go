package metrics

import (
	"strings"
	"testing"

	"einsora.dev/edge/hub"
)

func TestBoundsAtScrapeTime(t *testing.T) {
	c := hub.Counters{DroppedStatuses: 7}
	m := New(Options{})
	m.WatchBounds(func() hub.Counters { return c })
	c.TimelineLinesDropped, c.TimelineLinesRetired, c.StaleStatuses = 3, 2, 1
	out := scrape(t, m)
	for _, want := range []string{
		"einsora_hub_statuses_dropped_total 7",
		"einsora_hub_statuses_stale_total 1",
		"einsora_hub_timeline_lines_dropped_total 3",
		"einsora_hub_timeline_lines_retired_total 2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}
