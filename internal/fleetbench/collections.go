package fleetbench

import (
	"bufio"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The servers run with GODEBUG=gctrace=1, so their logs say when each of
// their collections ran. A change whose wake overlapped one is counted
// apart: at 10,000 agents a hub's mark takes half a second or more, and
// on cores shared with the bench's agents it delays them (see
// docs/performance.md, "Checkpoints beside the writer").

// withGCTrace returns env with gctrace=1 added to its GODEBUG, keeping
// what GODEBUG already says.
func withGCTrace(env []string) []string {
	debug := "gctrace=1"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok && v != "" {
			debug = v + ",gctrace=1"
		}
	}
	return append(env, "GODEBUG="+debug)
}

// span is when something ran.
type span struct{ from, to time.Time }

// gcLine is the runtime's trace of a collection: its start in seconds
// since the process started, then the wall time of its three phases.
var gcLine = regexp.MustCompile(`^gc \d+ @([0-9.]+)s [0-9]+%: ([0-9.]+)\+([0-9.]+)\+([0-9.]+) ms clock`)

// readCollections reads the collections traced in r by a process that
// started at started.
func readCollections(r io.Reader, started time.Time) []span {
	var spans []span
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := gcLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var f [4]float64
		for i := range f {
			f[i], _ = strconv.ParseFloat(m[i+1], 64)
		}
		from := started.Add(time.Duration(f[0] * float64(time.Second)))
		spans = append(spans, span{from: from, to: from.Add(time.Duration((f[1] + f[2] + f[3]) * float64(time.Millisecond)))})
	}
	return spans
}

// collections are the collections of the processes since they started.
func collections(ps []*process) []span {
	var spans []span
	for _, p := range ps {
		f, err := os.Open(p.logf.Name())
		if err != nil {
			continue
		}
		if _, err := f.Seek(p.logFrom, io.SeekStart); err == nil {
			spans = append(spans, readCollections(f, p.started)...)
		}
		f.Close()
	}
	return spans
}

// during reports whether [from, to] overlaps any of spans.
func during(from, to time.Time, spans []span) bool {
	for _, s := range spans {
		if !from.After(s.to) && !to.Before(s.from) {
			return true
		}
	}
	return false
}
