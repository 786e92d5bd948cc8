package vz

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/drivers"
)

// TestAdoptionFigures measures, with the fake hypervisor, how long a new
// driver (an agent restart) takes to adopt 50 live helpers against 1, and
// a helper's resident memory. Run with EINSORA_VZ_FIGURES=1 and -v.
func TestAdoptionFigures(t *testing.T) {
	if os.Getenv("EINSORA_VZ_FIGURES") == "" {
		t.Skip("set EINSORA_VZ_FIGURES=1 to measure")
	}
	const runs = 7
	results := map[int]time.Duration{}
	var rss []int
	for _, n := range []int{1, 50} {
		dir, imgs := t.TempDir(), t.TempDir()
		img := image(t, imgs, "run.raw", "run")
		d := newTestDriver(t, Options{Dir: dir})
		for i := range n {
			if err := d.Start(ctxT(t), spec(fmt.Sprintf("w%02d", i), img, 1)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			waitState(t, d, fmt.Sprintf("w%02d", i), drivers.StateRunning)
		}
		if n == 50 {
			for i := range n {
				kb, err := vmRSS(helperPid(t, d, fmt.Sprintf("w%02d", i)))
				if err != nil {
					t.Fatal(err)
				}
				rss = append(rss, kb)
			}
		}
		d.Close()
		var times []time.Duration
		for range runs {
			start := time.Now()
			d2, err := New(Options{Dir: dir, HelperCommand: helperCommand("fake")})
			el := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if got := d2.Adopted(); got != n {
				t.Fatalf("adopted %d, want %d", got, n)
			}
			d2.Close()
			times = append(times, el)
		}
		slices.Sort(times)
		results[n] = times[runs/2]
		t.Logf("adopt %2d helpers: median %v over %d runs (min %v, max %v)", n, times[runs/2], runs, times[0], times[runs-1])
	}
	slices.Sort(rss)
	t.Logf("helper RSS over 50 helpers: median %d KiB (min %d, max %d)", rss[len(rss)/2], rss[0], rss[len(rss)-1])
	t.Logf("ratio: adopting 50 takes %.1f× adopting 1 (%.2f ms per helper)", float64(results[50])/float64(results[1]),
		float64(results[50])/50/float64(time.Millisecond))
}

// vmRSS reads a process's resident set from /proc.
func vmRSS(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("pid %d: no VmRSS", pid)
}
