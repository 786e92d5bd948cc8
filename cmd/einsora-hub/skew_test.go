package main

import (
	"os/exec"
	"strings"
	"testing"
)

func TestCompareVersionsAsDpkg(t *testing.T) {
	pairs := []struct {
		a, b string
		want int
	}{
		{"1.2.3", "1.2.3", 0},
		{"1.2.3", "1.10.0", -1},
		{"1.2.3~rc1", "1.2.3", -1},
		{"1.2.3+git20260101.abc1234", "1.2.3", 1},
		{"0.0.0~git20261201.d309a07", "0.0.1", -1},
		{"0.0.0~git20261201.d309a07", "0.0.0~git20261202.0000000", -1},
		{"0.0.1~test1", "0.0.1~test2", -1},
		{"v1.2.0", "1.2", 1},
		{"1.2a", "1.2+", -1},
		{"1.02", "1.2", 0},
	}
	_, err := exec.LookPath("dpkg")
	haveDpkg := err == nil
	for _, p := range pairs {
		if got := compareVersions(p.a, p.b); got != p.want {
			t.Errorf("compare(%s, %s) = %d, want %d", p.a, p.b, got, p.want)
		}
		if got := compareVersions(p.b, p.a); got != -p.want {
			t.Errorf("compare(%s, %s) = %d, want %d", p.b, p.a, got, -p.want)
		}
		// The same answer as dpkg itself, where it runs.
		if haveDpkg && !strings.HasPrefix(p.a, "v") {
			op := map[int]string{-1: "lt", 0: "eq", 1: "gt"}[p.want]
			if err := exec.Command("dpkg", "--compare-versions", p.a, op, p.b).Run(); err != nil {
				t.Errorf("dpkg disagrees: %s %s %s is false", p.a, op, p.b)
			}
		}
	}
}

func TestMachineLsFlagsOlderAgents(t *testing.T) {
	if got := agentColumn("1.2.3", "1.3.0"); got != "1.2.3 (older than the hub's 1.3.0)" {
		t.Errorf("older agent: %q", got)
	}
	for _, tc := range [][2]string{{"1.3.0", "1.3.0"}, {"1.4.0", "1.3.0"}, {"dev", "1.3.0"}, {"1.2.0", "dev"}, {"", "1.3.0"}} {
		if got := agentColumn(tc[0], tc[1]); got != tc[0] {
			t.Errorf("agent %q, hub %q: %q, want it unflagged", tc[0], tc[1], got)
		}
	}
}
