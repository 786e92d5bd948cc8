//go:build unix

package macosnative

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"einsora.dev/edge/drivers"
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

func (s *lineSink) all() []drivers.LogLine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]drivers.LogLine(nil), s.lines...)
}

func (s *lineSink) has(stream, text string) bool {
	for _, l := range s.all() {
		if l.Stream == stream && l.Line == text {
			return true
		}
	}
	return false
}

func followInBackground(d *Driver, w string, sink *lineSink) <-chan error {
	done := make(chan error, 1)
	go func() { done <- d.FollowLogs(context.Background(), w, time.Time{}, sink.emit) }()
	return done
}

func waitDone(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("FollowLogs: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("FollowLogs did not return when the process ended")
	}
}

// TestFollowLogs: stdout and stderr are told apart, and the follow ends
// with the process after its last words.
func TestFollowLogs(t *testing.T) {
	d := newDriver(t, Options{Dir: t.TempDir(), StopGrace: 5 * time.Second})
	start(t, d, "w", 1, "exec:"+prog+" serve")
	var sink lineSink
	done := followInBackground(d, "w", &sink)
	deadline := time.Now().Add(15 * time.Second)
	for !sink.has(drivers.LogStdout, "serving") {
		if time.Now().After(deadline) {
			t.Fatalf("no serving line: %+v", sink.all())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.Stop(ctx(t), "w"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done)
	if !sink.has(drivers.LogStdout, "terminated") {
		t.Errorf("last words lost: %+v", sink.all())
	}

	start(t, d, "bad", 1, "exec:"+prog+" no-such-mode")
	var errSink lineSink
	waitDone(t, followInBackground(d, "bad", &errSink))
	if !errSink.has(drivers.LogStderr, "unknown mode no-such-mode") {
		t.Errorf("stderr: %+v", errSink.all())
	}
}

// TestFollowLogsBoundsFiles: a follower empties an output file read past
// MaxLogFile, so a chatty process does not fill the disk.
func TestFollowLogsBoundsFiles(t *testing.T) {
	d := newDriver(t, Options{Dir: t.TempDir()})
	start(t, d, "w", 1, "exec:"+prog+" spew 3000")
	var sink lineSink
	waitDone(t, followInBackground(d, "w", &sink))
	if !sink.has(drivers.LogStdout, "done") {
		t.Fatalf("last line lost; got %d lines", len(sink.all()))
	}
	st, err := os.Stat(d.LogPath("w"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > MaxLogFile {
		t.Errorf("stdout file holds %d bytes after the follow, bound %d", st.Size(), MaxLogFile)
	}
	if n := len(sink.all()); n < 1000 {
		t.Errorf("only %d lines followed", n)
	}
	if l := sink.all()[0].Line; !strings.HasPrefix(l, "00000 ") {
		t.Errorf("first line %.10q", l)
	}
}
