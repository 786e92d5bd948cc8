package dashboard

import (
	"strings"
	"testing"
)

// Agent versions and sign-in redirects come from outside: neither may
// panic, and a redirect never leaves the dashboard.
func FuzzAgentVersionAndNext(f *testing.F) {
	for _, s := range []string{"v1.2.3", "1.2.3-rc1", "dev", "", "v1..2", "v999999999999999999999.0.0", "//evil.example", "/ui/machines/x", "/ui/\\evil"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		olderVersion(s, "v1.0.0")
		olderVersion("v1.0.0", s)
		if next := safeNext(s); !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
			t.Errorf("safeNext(%q) = %q leaves the dashboard", s, next)
		}
	})
}
