package hubclient

import (
	"testing"
	"time"

	"einsora.dev/edge/protocol"
)

// ceilingRand returns the largest value it may: the ceiling of the range,
// so a test reads the range Next draws from.
func ceilingRand(n int64) int64 { return n - 1 }

func TestBackoffFullJitterRangeDoublesToCap(t *testing.T) {
	var asked []int64
	b := Backoff{Base: time.Second, Cap: 60 * time.Second, Rand: func(n int64) int64 {
		asked = append(asked, n)
		return n - 1
	}}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i, w := range want {
		if got := b.Next(); got != w*time.Second {
			t.Errorf("attempt %d: got %s, want %s", i, got, w*time.Second)
		}
	}
	// Full jitter: every draw is from [0, ceiling], zero included.
	for i, n := range asked {
		if n <= 0 || time.Duration(n-1) > 60*time.Second {
			t.Errorf("draw %d from [0, %d): out of the capped range", i, n)
		}
	}
	if b.Attempt() != len(want) {
		t.Errorf("got attempt %d, want %d", b.Attempt(), len(want))
	}
}

func TestBackoffDrawsCanBeZero(t *testing.T) {
	b := Backoff{Base: time.Second, Cap: time.Minute, Rand: func(int64) int64 { return 0 }}
	for range 5 {
		if got := b.Next(); got != 0 {
			t.Fatalf("got %s, want 0 (full jitter reaches down to zero)", got)
		}
	}
}

func TestBackoffResetStartsAgain(t *testing.T) {
	b := Backoff{Base: time.Second, Cap: time.Minute, Rand: ceilingRand}
	for range 10 {
		b.Next()
	}
	b.Reset()
	if b.Attempt() != 0 {
		t.Fatalf("attempt after reset: %d", b.Attempt())
	}
	if got := b.Next(); got != time.Second {
		t.Errorf("first wait after reset: got %s, want 1s", got)
	}
}

func TestBackoffDefaultsAndNoOverflow(t *testing.T) {
	b := Backoff{Rand: ceilingRand}
	if got := b.Next(); got != DefaultBackoffBase {
		t.Errorf("first wait: got %s, want the default base %s", got, DefaultBackoffBase)
	}
	for range 200 {
		if got := b.Next(); got < 0 || got > DefaultBackoffCap {
			t.Fatalf("attempt %d: got %s, outside [0, %s]", b.Attempt(), got, DefaultBackoffCap)
		}
	}
	if got := b.Next(); got != DefaultBackoffCap {
		t.Errorf("after many attempts: got %s, want the cap %s", got, DefaultBackoffCap)
	}
}

// With the real source, waits spread over the whole range rather than
// bunching: what keeps a fleet from redialling a restarted hub in step.
func TestBackoffSpreadsOverTheRange(t *testing.T) {
	const n = 2000
	buckets := make([]int, 10)
	for range n {
		b := Backoff{Base: time.Second, Cap: time.Minute}
		w := b.Next()
		if w < 0 || w > time.Second {
			t.Fatalf("first wait %s outside [0, 1s]", w)
		}
		buckets[min(int(w*10/time.Second), 9)]++
	}
	for i, c := range buckets {
		if c < n/10/2 {
			t.Errorf("bucket %d of 10 holds %d of %d waits: not spread", i, c, n)
		}
	}
}

// The hub's reconnect window widens the first wait after a success to all
// of it (capped); later waits double from the base as before.
func TestBackoffFirstWaitSpansTheHubsWindow(t *testing.T) {
	b := Backoff{Base: time.Second, Cap: time.Minute, Rand: ceilingRand}
	b.Window = WindowOf(&protocol.SyncResponse{ReconnectWindowMS: 8000})
	if b.Window != 8*time.Second {
		t.Fatalf("window %s, want 8s", b.Window)
	}
	if got := b.Next(); got != 8*time.Second {
		t.Errorf("first wait ceiling %s, want the window, 8s", got)
	}
	if got := b.Next(); got != 2*time.Second {
		t.Errorf("second wait ceiling %s, want 2s, doubling from the base", got)
	}
	b.Reset()
	b.Window = 10 * time.Minute
	if got := b.Next(); got != time.Minute {
		t.Errorf("a window over the cap: %s, want the cap", got)
	}
	if WindowOf(nil) != 0 || WindowOf(&protocol.SyncResponse{ReconnectWindowMS: -5}) != 0 {
		t.Error("no window from a nil or negative answer")
	}
	if got := WindowOf(&protocol.SyncResponse{ReconnectWindowMS: 1 << 62}); got != time.Hour {
		t.Errorf("a huge window: %s, want it bounded at an hour", got)
	}
}
