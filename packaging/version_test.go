package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// versionRepo makes a git repository holding scripts/version.sh and one
// commit, and returns a function that runs git in it.
func versionRepo(t *testing.T) (dir string, git func(args ...string)) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir = t.TempDir()
	script, err := os.ReadFile("../scripts/version.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scripts/version.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	git = func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
			"GIT_COMMITTER_DATE=2026-03-04T05:06:07Z", "GIT_AUTHOR_DATE=2026-03-04T05:06:07Z")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "one")
	return dir, git
}

func version(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(dir, "scripts/version.sh")).Output()
	if err != nil {
		t.Fatalf("version.sh: %v", err)
	}
	v := strings.TrimSpace(string(out))
	// What dpkg requires of an upstream version without an epoch or a
	// revision: a leading digit, then alphanumerics and . + ~.
	if !regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`).MatchString(v) {
		t.Errorf("version %q is not one dpkg accepts", v)
	}
	if _, err := exec.LookPath("dpkg"); err == nil {
		if out, err := exec.Command("dpkg", "--validate-version", v).CombinedOutput(); err != nil {
			t.Errorf("dpkg --validate-version %s: %v %s", v, err, out)
		}
	}
	return v
}

func TestVersionOfAnUntaggedCheckoutIsAPreRelease(t *testing.T) {
	dir, git := versionRepo(t)
	v := version(t, dir)
	if !regexp.MustCompile(`^0\.0\.0~git20260304\.[0-9a-f]{7}$`).MatchString(v) {
		t.Errorf("untagged: %q, want 0.0.0~git20260304.<sha>", v)
	}
	if err := os.WriteFile(filepath.Join(dir, "scripts/version.sh"), append(mustRead(t, filepath.Join(dir, "scripts/version.sh")), "# changed\n"...), 0o755); err != nil {
		t.Fatal(err)
	}
	if dirty := version(t, dir); dirty != v {
		t.Errorf("untagged and dirty: %q, want %q", dirty, v)
	}
	// A tag that is no version is not a release.
	git("tag", "vnext")
	if got := version(t, dir); got != v {
		t.Errorf("tagged vnext: %q, want %q", got, v)
	}
}

func TestVersionOfATaggedCheckoutIsTheTag(t *testing.T) {
	dir, git := versionRepo(t)
	git("tag", "v1.2.3")
	if v := version(t, dir); v != "1.2.3" {
		t.Errorf("tagged v1.2.3: %q, want 1.2.3", v)
	}
	if err := os.WriteFile(filepath.Join(dir, "scripts/version.sh"), append(mustRead(t, filepath.Join(dir, "scripts/version.sh")), "# changed\n"...), 0o755); err != nil {
		t.Fatal(err)
	}
	// A dirty tree sorts after the release it started from, never as it.
	if v := version(t, dir); !regexp.MustCompile(`^1\.2\.3\+git20260304\.[0-9a-f]{7}$`).MatchString(v) {
		t.Errorf("tagged and dirty: %q, want 1.2.3+git20260304.<sha>", v)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
