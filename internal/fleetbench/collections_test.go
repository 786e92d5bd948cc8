package fleetbench

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The runtime's trace of each collection gives its start since the
// process started and its phases' wall time; a change overlapping one,
// by as little as its edge, met it.
func TestCollectionsReadFromTheServersTrace(t *testing.T) {
	started := time.Now()
	trace := `time=… level=INFO msg="hub serving"
gc 575 @550.128s 0%: 0.10+406+0.005 ms clock, 0.20+0/204/379+0.010 ms cpu, 506->507->308 MB, 700 MB goal, 88 MB stacks, 0 MB globals, 2 P
gc 576 @639.907s 0%: 0.12+505+0.051 ms clock, 0.24+1.8/261/361+0.10 ms cpu, 593->613->328 MB, 706 MB goal, 88 MB stacks, 0 MB globals, 2 P (forced)
GC forced
`
	spans := readCollections(strings.NewReader(trace), started)
	if len(spans) != 2 {
		t.Fatalf("got %d collections, want 2: %v", len(spans), spans)
	}
	at := func(s float64) time.Time { return started.Add(time.Duration(s * float64(time.Second))) }
	if got, want := spans[1].from, at(639.907); !got.Equal(want) {
		t.Errorf("second collection from %v, want %v", got.Sub(started), want.Sub(started))
	}
	if got, want := spans[1].to.Sub(spans[1].from), time.Duration(505.171*float64(time.Millisecond)); got != want {
		t.Errorf("second collection lasted %v, want %v", got, want)
	}
	for _, c := range []struct {
		from, to float64
		met      bool
	}{
		{640.0, 640.002, true},   // inside
		{639.9, 639.907, true},   // ends as it starts
		{640.413, 640.42, false}, // after its end
		{639.0, 639.9, false},    // before
		{549.0, 551.0, true},     // across the first
	} {
		if got := during(at(c.from), at(c.to), spans); got != c.met {
			t.Errorf("a change from %.3f s to %.3f s: met a collection %v, want %v", c.from, c.to, got, c.met)
		}
	}
}

func TestServersTraceTheirCollections(t *testing.T) {
	if got := withGCTrace([]string{"HOME=/x"}); !slices.Contains(got, "GODEBUG=gctrace=1") {
		t.Errorf("got %q, want GODEBUG=gctrace=1", got)
	}
	// What GODEBUG said is kept; the last GODEBUG is the one a process
	// gets.
	if got := withGCTrace([]string{"GODEBUG=madvdontneed=1"}); got[len(got)-1] != "GODEBUG=madvdontneed=1,gctrace=1" {
		t.Errorf("got %q, want madvdontneed=1 kept beside gctrace=1", got)
	}
	// A server started for the bench is told to trace, into its log.
	log := filepath.Join(t.TempDir(), "server.log")
	p, _, err := startProcess(exec.Command("sh", "-c", `echo "GODEBUG=$GODEBUG" >&2; echo ready`), log, "ready")
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
	p.logf.Close()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "gctrace=1") {
		t.Errorf("the server's environment said %q, want gctrace=1 in GODEBUG", b)
	}
}
