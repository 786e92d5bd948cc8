package drivers

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestLineSplitter(t *testing.T) {
	var got []string
	l := &LineSplitter{Stream: LogStderr, Now: time.Now, Emit: func(ll LogLine) {
		if ll.Stream != LogStderr || ll.Time.IsZero() {
			t.Errorf("line %+v", ll)
		}
		got = append(got, fmt.Sprintf("%.8s/%d", ll.Line, len(ll.Line)))
	}}
	fmt.Fprint(l, "one\ntw")
	fmt.Fprint(l, "o\nthree")
	l.Write([]byte(strings.Repeat("y", MaxLogLine+5) + "\n"))
	fmt.Fprint(l, "last")
	l.Close()
	want := []string{"one/3", "two/3", "threeyyy/" + fmt.Sprint(MaxLogLine), "yyyyyyyy/10", "last/4"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
