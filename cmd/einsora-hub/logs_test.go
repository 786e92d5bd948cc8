package main

import (
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/protocol"
)

func TestLogLinesEscapedOnATerminal(t *testing.T) {
	l := protocol.LogLine{Time: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), Stream: "stdout",
		Line: "ok\ttab \x1b[2J\x1b]0;title\x07 \r\u202e bad\xff end\\"}
	got := formatLogLine(l, true)
	for _, bad := range []string{"\x1b", "\x07", "\r", "\u202e", "\xff"} {
		if strings.Contains(got, bad) {
			t.Errorf("%q holds %q", got, bad)
		}
	}
	for _, want := range []string{" stdout ok\ttab ", `\x1b[2J`, `\a`, `\r`, `\u202e`, `bad\xff end\\`} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	// Not on a terminal (a pipe, a file): the line as the workload wrote it.
	if raw := formatLogLine(l, false); !strings.HasSuffix(raw, " stdout "+l.Line) {
		t.Errorf("raw: %q", raw)
	}
}
