package docker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/protocol"
)

type lineSink struct {
	mu    sync.Mutex
	lines []drivers.LogLine
}

func (s *lineSink) emit(l drivers.LogLine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, l)
}

func (s *lineSink) has(stream, text string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if l.Stream == stream && l.Line == text {
			return true
		}
	}
	return false
}

func (s *lineSink) all() []drivers.LogLine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]drivers.LogLine(nil), s.lines...)
}

// TestFollowLogs: the server's stdout comes through the engine's log
// stream, stamped by the engine, while it runs; the follow ends when it
// stops; a follow resumed from the newest line repeats nothing.
func TestFollowLogs(t *testing.T) {
	imgs := requireImages(t)
	d := newTestDriver(t, Options{})
	w := testPrefix + "logs"
	removeAtEnd(t, d, w)
	port := freePort(t)
	mustStart(t, d, drivers.Spec{Workload: w, Attempt: 1, Image: imgs.serve, WorkloadSpec: protocol.WorkloadSpec{
		Command: []string{"http"}, Ports: []protocol.Port{{Host: port, Container: 8080}}}})
	waitState(t, d, w, drivers.StateRunning)
	var sink lineSink
	done := make(chan error, 1)
	before := time.Now().Add(-time.Minute)
	go func() { done <- d.FollowLogs(context.Background(), w, time.Time{}, sink.emit) }()
	fetch(t, port, "/env/PATH")
	deadline := time.Now().Add(20 * time.Second)
	for !sink.has(drivers.LogStdout, "listening on :8080") || !sink.has(drivers.LogStdout, "get env PATH") {
		if time.Now().After(deadline) {
			t.Fatalf("lines not followed: %+v", sink.all())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, l := range sink.all() {
		if l.Time.Before(before) || l.Time.After(time.Now().Add(time.Minute)) {
			t.Errorf("line %q stamped %s", l.Line, l.Time)
		}
	}
	if err := d.Stop(testCtx(t), w); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("FollowLogs: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("FollowLogs did not return when the container stopped")
	}

	lines := sink.all()
	var again lineSink
	if err := d.FollowLogs(context.Background(), w, lines[len(lines)-1].Time, again.emit); err != nil {
		t.Fatal(err)
	}
	if got := again.all(); len(got) != 0 {
		t.Errorf("resumed follow repeated %+v", got)
	}
}

// TestFollowLogsStderr: stderr is told apart from stdout.
func TestFollowLogsStderr(t *testing.T) {
	imgs := requireImages(t)
	d := newTestDriver(t, Options{})
	w := testPrefix + "logs-stderr"
	removeAtEnd(t, d, w)
	mustStart(t, d, drivers.Spec{Workload: w, Attempt: 1, Image: imgs.serve, WorkloadSpec: protocol.WorkloadSpec{Command: []string{"no-such-mode"}}})
	waitState(t, d, w, drivers.StateExited)
	var sink lineSink
	if err := d.FollowLogs(testCtx(t), w, time.Time{}, sink.emit); err != nil {
		t.Fatal(err)
	}
	got := sink.all()
	if len(got) != 1 || got[0].Stream != drivers.LogStderr || !strings.Contains(got[0].Line, `unknown mode "no-such-mode"`) {
		t.Errorf("got %+v, want one stderr line", got)
	}
	var none lineSink
	if err := d.FollowLogs(testCtx(t), testPrefix+"no-such-workload", time.Time{}, none.emit); err != nil || len(none.all()) != 0 {
		t.Errorf("a workload without a container: %v, %+v", err, none.all())
	}
}
