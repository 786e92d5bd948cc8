package main

import (
	"strings"
)

// agentColumn is what `machine ls` shows of an agent's version: flagged
// when it is older than this einsora-hub, the order of upgrades being hubs
// first, then agents (docs/operations.md, Upgrades). Versions that are not
// releases or snapshots (dev builds) are shown as they are.
func agentColumn(agent, hub string) string {
	if agent != "" && comparable(agent) && comparable(hub) && compareVersions(agent, hub) < 0 {
		return agent + " (older than the hub's " + strings.TrimPrefix(hub, "v") + ")"
	}
	return agent
}

func comparable(v string) bool {
	v = strings.TrimPrefix(v, "v")
	return v != "" && v[0] >= '0' && v[0] <= '9'
}

// compareVersions orders two versions as dpkg orders upstream versions
// (scripts/version.sh makes them): runs of non-digits compare with "~"
// before everything, even the end, and letters before other characters;
// runs of digits compare as numbers. It returns -1, 0 or 1.
func compareVersions(a, b string) int {
	a, b = strings.TrimPrefix(a, "v"), strings.TrimPrefix(b, "v")
	for a != "" || b != "" {
		var sa, sb string
		sa, a = span(a, false)
		sb, b = span(b, false)
		if c := compareNonDigits(sa, sb); c != 0 {
			return c
		}
		sa, a = span(a, true)
		sb, b = span(b, true)
		if c := compareNumbers(sa, sb); c != 0 {
			return c
		}
	}
	return 0
}

func span(s string, digits bool) (run, rest string) {
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9') == digits {
		i++
	}
	return s[:i], s[i:]
}

// order is dpkg's weight of one character: "~" lowest, then the end of
// the run, then letters, then the rest.
func order(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	c := s[i]
	switch {
	case c == '~':
		return -1
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		return int(c)
	default:
		return int(c) + 256
	}
}

func compareNonDigits(a, b string) int {
	for i := 0; i < len(a) || i < len(b); i++ {
		if oa, ob := order(a, i), order(b, i); oa != ob {
			if oa < ob {
				return -1
			}
			return 1
		}
	}
	return 0
}

func compareNumbers(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	switch {
	case len(a) != len(b):
		if len(a) < len(b) {
			return -1
		}
		return 1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
