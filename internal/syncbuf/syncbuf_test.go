package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Writers at once lose nothing, and a reader meanwhile is safe (under
// the race detector).
func TestConcurrentWritesAreAllKept(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("x\n"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "x\n"); n != 800 {
		t.Errorf("%d writes kept, want 800", n)
	}
}
