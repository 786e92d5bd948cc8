package inventory

import (
	"context"
	"testing"
)

// withLevels gives an Apple sysctl fixture named performance levels.
func withLevels(s fakeSysctl, levels ...any) fakeSysctl {
	delete(s.ints, "hw.perflevel0.physicalcpu")
	delete(s.ints, "hw.perflevel1.physicalcpu")
	s.ints["hw.nperflevels"] = uint64(len(levels) / 2)
	s.ints["hw.logicalcpu"] = 0
	for i := 0; i < len(levels); i += 2 {
		n := i / 2
		s.strs["hw.perflevel"+string(rune('0'+n))+".name"] = levels[i].(string)
		s.ints["hw.perflevel"+string(rune('0'+n))+".physicalcpu"] = uint64(levels[i+1].(int))
		s.ints["hw.logicalcpu"] += uint64(levels[i+1].(int))
	}
	return s
}

func TestAppleCoreLevelsByName(t *testing.T) {
	tests := []struct {
		name      string
		sys       fakeSysctl
		perf, eff int
	}{
		// M5 Pro and Max: "Super" then "Performance", no efficiency cores.
		{"m5_max_super_and_performance", withLevels(appleSysctl("Apple M5 Max", 0, 0, 128, "26.1"), "Super", 6, "Performance", 12), 18, 0},
		{"m4_performance_efficiency", withLevels(appleSysctl("Apple M4", 0, 0, 16, "15.2"), "Performance", 4, "Efficiency", 6), 4, 6},
		// Named in an unexpected order: the name decides, not the index.
		{"efficiency_first", withLevels(appleSysctl("Apple MX", 0, 0, 16, "26"), "Efficiency", 4, "Performance", 8), 8, 4},
		{"nul_terminated_name", withLevels(appleSysctl("Apple M4", 0, 0, 16, "15.2"), "Performance\x00", 4, "Efficiency\x00", 6), 4, 6},
		// Before macOS 12 there are no names: level 0 is performance.
		{"unnamed_levels", appleSysctl("Apple M1", 4, 4, 16, "11.6"), 4, 4},
		{"intel_no_levels", fakeSysctl{ints: map[string]uint64{"hw.logicalcpu": 8}}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			perf, eff, err := appleCoreLevels(tt.sys)
			if err != nil {
				t.Fatal(err)
			}
			if perf != tt.perf || eff != tt.eff {
				t.Fatalf("got %d performance, %d efficiency; want %d, %d", perf, eff, tt.perf, tt.eff)
			}
		})
	}
}

// A kernel that claims a wild number of levels costs a bounded loop.
func TestAppleCoreLevelsBounded(t *testing.T) {
	s := fakeSysctl{strs: map[string]string{}, ints: map[string]uint64{"hw.nperflevels": 1 << 40}}
	var reads int
	counting := countingSysctl{s, &reads}
	if _, _, err := appleCoreLevels(counting); err != nil {
		t.Fatal(err)
	}
	if reads > 2*maxPerfLevels+1 {
		t.Fatalf("%d sysctl reads", reads)
	}
}

type countingSysctl struct {
	fakeSysctl
	n *int
}

func (c countingSysctl) Uint(name string) (uint64, error) { *c.n++; return c.fakeSysctl.Uint(name) }
func (c countingSysctl) String(name string) (string, error) {
	*c.n++
	return c.fakeSysctl.String(name)
}

func TestProbeDarwinM5Max(t *testing.T) {
	p := New(Options{Root: t.TempDir()})
	p.goos, p.goarch = "darwin", "arm64"
	p.probers = darwinProbers(withLevels(appleSysctl("Apple M5 Max", 0, 0, 128, "26.1"), "Super", 6, "Performance", 12))
	p.run = fakeCommands{"system_profiler SPDisplaysDataType -json": "system-profiler-displays-m3-max.json"}.run
	inv := p.Probe(context.Background())
	checkGolden(t, "darwin-m5-max", inv)
}
