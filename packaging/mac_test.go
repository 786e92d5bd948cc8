package packaging

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"einsora.dev/edge/internal/cli"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The plist is a system daemon's that leaves VM helpers and native
// workloads running across agent restarts, with paths for either Homebrew
// prefix, on the one macOS state directory.
func TestLaunchdPlistForASystemDaemon(t *testing.T) {
	p := read(t, "launchd/dev.einsora.agent.plist")
	for _, want := range []string{
		"<key>AbandonProcessGroup</key>\n\t<true/>",
		"<key>ExitTimeOut</key>",
		"<string>@@PREFIX@@/bin/einsora-agent</string>",
		"<string>--state-dir</string>\n\t\t<string>" + cli.DarwinAgentStateDir + "</string>",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("plist lacks %q", want)
		}
	}
	for _, bad := range []string{"/opt/homebrew", "/usr/local"} {
		if strings.Contains(p, bad) {
			t.Errorf("plist hard-codes %s: it must work under either prefix", bad)
		}
	}
}

func TestFormula(t *testing.T) {
	f := read(t, "homebrew/einsora-agent.rb")
	for _, want := range []string{
		`ENV["CGO_ENABLED"] = "1"`,
		`"--entitlements",`,
		`"packaging/homebrew/einsora-agent.entitlements"`,
		`inreplace "packaging/launchd/dev.einsora.agent.plist", "@@PREFIX@@", HOMEBREW_PREFIX`,
		`run [opt_bin/"einsora-agent", "run", "--state-dir", "` + cli.DarwinAgentStateDir + `"]`,
		"require_root true",
		"doctor --state-dir",
		`url "@@URL@@"`, `sha256 "@@SHA256@@"`,
	} {
		if !strings.Contains(f, want) {
			t.Errorf("formula lacks %q", want)
		}
	}
	if !strings.Contains(read(t, "homebrew/einsora-agent.entitlements"), "com.apple.security.virtualization") {
		t.Error("entitlements lack com.apple.security.virtualization")
	}
	// Every --state-dir in the formula is the one directory.
	for _, m := range regexp.MustCompile(`"--state-dir", "([^"]*)"`).FindAllStringSubmatch(f, -1) {
		if m[1] != cli.DarwinAgentStateDir {
			t.Errorf("formula uses state directory %q", m[1])
		}
	}
}

func TestRenderFormula(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	tarball := filepath.Join(t.TempDir(), "einsora-edge-1.2.0.tar.gz")
	if err := os.WriteFile(tarball, []byte("release bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	const url = "https://einsora.dev/releases/einsora-edge-1.2.0.tar.gz"
	out, err := exec.Command("bash", "../scripts/render-formula.sh", url, "v1.2.0", tarball).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{`url "` + url + `"`, `version "1.2.0"`} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered formula lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`sha256 "([0-9a-f]{64})"`).FindStringSubmatch(got); m == nil {
		t.Error("rendered formula has no sha256")
	} else if want := sha256Hex(t, tarball); m[1] != want {
		t.Errorf("sha256 %s, want %s", m[1], want)
	}
	if regexp.MustCompile(`@@(URL|VERSION|SHA256)@@`).MatchString(got) {
		t.Error("placeholders left in the rendered formula")
	}
	for _, bad := range [][]string{{"http://x/y.tar.gz", "1.0"}, {url, "1.0; rm -rf /"}} {
		if err := exec.Command("bash", "../scripts/render-formula.sh", bad[0], bad[1], tarball).Run(); err == nil {
			t.Errorf("render accepted %q", bad)
		}
	}
}

func sha256Hex(t *testing.T, path string) string {
	sum := sha256.Sum256([]byte(read(t, path)))
	return hex.EncodeToString(sum[:])
}

// The Mac self-test cannot run here; it must at least parse.
func TestScriptsParse(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	for _, s := range []string{"../scripts/mac-selftest.sh", "../scripts/render-formula.sh"} {
		if out, err := exec.Command("bash", "-n", s).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", s, err, out)
		}
	}
}
