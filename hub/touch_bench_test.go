package hub

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkPresenceBatch times one presence batch (touch) of a region
// whose every machine was heard since the last: what the store's writer
// is held for every PresenceEvery.
func BenchmarkPresenceBatch(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("machines=%d", n), func(b *testing.B) {
			h := benchRegion(b, n)
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("m-%05d", i)
			}
			at := epoch
			for b.Loop() {
				b.StopTimer()
				at = at.Add(15 * time.Second)
				for _, id := range ids {
					h.feed.note(id, at)
				}
				b.StartTimer()
				if err := h.touch(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
