package solo

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// fakeLeader is a hub whose leadership the test sets.
type fakeLeader struct {
	mu      sync.Mutex
	leading bool
	changed chan struct{}
}

func newFakeLeader() *fakeLeader { return &fakeLeader{changed: make(chan struct{})} }

func (l *fakeLeader) Leadership() (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading, l.changed
}

func (l *fakeLeader) set(leading bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leading = leading
	close(l.changed)
	l.changed = make(chan struct{})
}

// fakeAgent records whether it runs.
type fakeAgent struct {
	running chan bool
}

func (a *fakeAgent) Run(ctx context.Context) error {
	a.running <- true
	<-ctx.Done()
	a.running <- false
	return nil
}

func expect(t *testing.T, a *fakeAgent, want bool, why string) {
	t.Helper()
	select {
	case got := <-a.running:
		if got != want {
			t.Fatalf("%s: agent running=%v, want %v", why, got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: agent running did not become %v", why, want)
	}
}

func expectNothing(t *testing.T, a *fakeAgent, why string) {
	t.Helper()
	select {
	case got := <-a.running:
		t.Fatalf("%s: agent running=%v, want no change", why, got)
	case <-time.After(100 * time.Millisecond):
	}
}

// Rule 9: the in-process agent runs only while its hub leads the region,
// so two hubs on one store never run two agents for one machine.
func TestRule9_InProcessAgentOnlyWhileLeading(t *testing.T) {
	l := newFakeLeader()
	a := &fakeAgent{running: make(chan bool, 4)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runWhileLeading(ctx, l, a, slog.New(slog.NewTextHandler(io.Discard, nil))) }()

	expectNothing(t, a, "a standby")
	l.set(true)
	expect(t, a, true, "after taking the lease")
	l.set(false)
	expect(t, a, false, "after stepping down")
	expectNothing(t, a, "stepped down")
	l.set(true)
	expect(t, a, true, "leading again")
	cancel()
	expect(t, a, false, "on stop")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
