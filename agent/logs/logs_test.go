package logs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/clock"
)

func newStore(t *testing.T, max int64) (*Store, *clock.Fake, string) {
	t.Helper()
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := Open(dir, Options{MaxBytes: max, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clk, dir
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		st, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		n += st.Size()
	}
	return n
}

func TestReadTailSince(t *testing.T) {
	s, clk, _ := newStore(t, 0)
	for i := range 10 {
		stream := Stdout
		if i%2 == 1 {
			stream = Stderr
		}
		if err := s.Append("w", Entry{Stream: stream, Line: fmt.Sprintf("line %d\n", i)}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	all, err := s.Read("w", 0, time.Time{})
	if err != nil || len(all) != 10 {
		t.Fatalf("Read all: %d entries, %v", len(all), err)
	}
	if all[0].Line != "line 0" || all[1].Stream != Stderr || !all[1].Time.Equal(all[0].Time.Add(time.Second)) {
		t.Errorf("entries: %+v %+v", all[0], all[1])
	}
	tail, _ := s.Read("w", 3, time.Time{})
	if len(tail) != 3 || tail[0].Line != "line 7" || tail[2].Line != "line 9" {
		t.Errorf("tail 3: %+v", tail)
	}
	since, _ := s.Read("w", 0, all[6].Time)
	if len(since) != 4 || since[0].Line != "line 6" {
		t.Errorf("since entry 6: %+v", since)
	}
	both, _ := s.Read("w", 2, all[3].Time)
	if len(both) != 2 || both[0].Line != "line 8" {
		t.Errorf("tail 2 since 3: %+v", both)
	}
	if got := s.Last("w"); !got.Equal(all[9].Time) {
		t.Errorf("Last: %s, want %s", got, all[9].Time)
	}
	none, err := s.Read("other", 5, time.Time{})
	if err != nil || len(none) != 0 {
		t.Errorf("a workload without output: %v, %v", none, err)
	}
}

// TestBound: writing far past the bound keeps the ring within it, with
// the newest lines kept and at least half the bound of them.
func TestBound(t *testing.T) {
	const max = MinMaxBytes
	s, _, dir := newStore(t, max)
	line := strings.Repeat("x", 1000)
	const n = 5000 // ~5 MB, twenty times the bound
	for i := range n {
		if err := s.Append("w", Entry{Stream: Stdout, Line: fmt.Sprintf("%05d %s", i, line)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := dirBytes(t, dir); got > max {
		t.Errorf("ring holds %d bytes, bound %d", got, max)
	}
	es, err := s.Read("w", 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if last := es[len(es)-1].Line; !strings.HasPrefix(last, fmt.Sprintf("%05d ", n-1)) {
		t.Errorf("newest line lost: %.10s", last)
	}
	if kept := int64(len(es)) * int64(len(line)+40); kept < max/2 {
		t.Errorf("only %d entries kept (~%d bytes), want at least half the bound", len(es), kept)
	}
	// In order, none lost in the middle.
	for i := 1; i < len(es); i++ {
		var a, b int
		fmt.Sscanf(es[i-1].Line, "%d", &a)
		fmt.Sscanf(es[i].Line, "%d", &b)
		if b != a+1 {
			t.Fatalf("entry %d follows %d", b, a)
		}
	}
}

// TestUntrustedLines: huge lines are cut, invalid UTF-8 is replaced, and
// control characters survive the round trip as data.
func TestUntrustedLines(t *testing.T) {
	s, _, dir := newStore(t, MinMaxBytes)
	huge := strings.Repeat("\x01", 10*MaxLine)
	if err := s.Append("w", Entry{Stream: Stdout, Line: huge}); err != nil {
		t.Fatal(err)
	}
	if err := s.Append("w", Entry{Stream: Stdout, Line: "bad \xff utf8 \x1b[2J"}); err != nil {
		t.Fatal(err)
	}
	es, err := s.Read("w", 0, time.Time{})
	if err != nil || len(es) != 2 {
		t.Fatalf("got %d entries, %v", len(es), err)
	}
	if len(es[0].Line) > MaxLine+10 || !strings.HasSuffix(es[0].Line, "[cut]") {
		t.Errorf("huge line kept %d bytes", len(es[0].Line))
	}
	if es[1].Line != "bad \uFFFD utf8 \x1b[2J" {
		t.Errorf("got %q", es[1].Line)
	}
	if got := dirBytes(t, dir); got > MinMaxBytes {
		t.Errorf("%d bytes on disk, bound %d", got, MinMaxBytes)
	}
}

func TestFollow(t *testing.T) {
	s, _, _ := newStore(t, 0)
	s.Append("w", Entry{Stream: Stdout, Line: "before"})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := s.Follow(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	s.Append("w", Entry{Stream: Stdout, Line: "after"})
	s.Append("other", Entry{Stream: Stdout, Line: "not mine"})
	if e := <-ch; e.Line != "after" {
		t.Errorf("got %q, want after", e.Line)
	}
	cancel()
	for range ch { // closed once ctx ends
	}

	// Removal ends a follower too, and the files go.
	ch, _ = s.Follow(context.Background(), "w")
	if err := s.Remove("w"); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch; ok {
		t.Error("follower not ended by Remove")
	}
	if es, _ := s.Read("w", 0, time.Time{}); len(es) != 0 {
		t.Errorf("entries after Remove: %v", es)
	}
}

// TestFollowLagging: a follower that does not read never blocks the
// writer; it loses lines and is told how many.
func TestFollowLagging(t *testing.T) {
	s, _, _ := newStore(t, 0)
	ch, err := s.Follow(context.Background(), "w")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range FollowBuffer + 100 {
			s.Append("w", Entry{Stream: Stdout, Line: fmt.Sprint(i)})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a lagging follower blocked the writer")
	}
	for range FollowBuffer {
		<-ch
	}
	s.Append("w", Entry{Stream: Stdout, Line: "next"})
	if e := <-ch; e.Stream != System || !strings.HasPrefix(e.Line, "100 lines dropped") {
		t.Errorf("got %+v, want a note of 100 dropped lines", e)
	}
	if e := <-ch; e.Line != "next" {
		t.Errorf("got %+v, want next", e)
	}
}

func TestReopenKeepsRing(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Append("w", Entry{Stream: Stdout, Line: "kept", Time: time.Unix(100, 0)})
	s.Close()
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Last("w"); !got.Equal(time.Unix(100, 0)) {
		t.Errorf("Last after reopen: %s", got)
	}
	s.Append("w", Entry{Stream: Stdout, Line: "more"})
	es, _ := s.Read("w", 0, time.Time{})
	if len(es) != 2 || es[0].Line != "kept" {
		t.Errorf("after reopen: %+v", es)
	}
	if _, err := Open(dir, Options{MaxBytes: 10}); err == nil {
		t.Error("Open accepted a bound under MinMaxBytes")
	}
}

// BenchmarkAppend: the rate at which one workload's lines of 100 bytes go
// into its ring, rotation included.
func BenchmarkAppend(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	line := strings.Repeat("x", 100)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if err := s.Append("w", Entry{Stream: Stdout, Line: line}); err != nil {
			b.Fatal(err)
		}
	}
}
