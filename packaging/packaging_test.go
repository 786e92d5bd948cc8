// Package packaging holds the service units and package definitions; its
// test checks that they name what the agent actually takes.
package packaging

import (
	"encoding/xml"
	"os"
	"strings"
	"testing"

	"einsora.dev/edge/agent"
)

func TestSystemdUnitRunsTheAgentAsNotify(t *testing.T) {
	b, err := os.ReadFile("systemd/einsora-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"Type=notify",
		"ExecStart=/usr/bin/einsora-agent run --state-dir /var/lib/einsora-agent",
		"WatchdogSec=",
		"KillMode=process",
		"StateDirectory=einsora-agent",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q", want)
		}
	}
}

func TestLaunchdPlistIsWellFormed(t *testing.T) {
	for _, path := range []string{"launchd/dev.einsora.agent.plist", "homebrew/einsora-agent.entitlements"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(strings.NewReader(string(b)))
		for {
			_, err := dec.Token()
			if err != nil {
				if err.Error() != "EOF" {
					t.Errorf("%s: %v", path, err)
				}
				break
			}
		}
	}
	b, _ := os.ReadFile("launchd/dev.einsora.agent.plist")
	if !strings.Contains(string(b), "<string>run</string>") || !strings.Contains(string(b), "/Library/Application Support/Einsora/agent") {
		t.Error("plist does not run the agent on its default state directory")
	}
}

var debs = []string{"einsora-agent", "einsora-hub"}

func TestDebContentsExist(t *testing.T) {
	for _, pkg := range debs {
		b, err := os.ReadFile("deb/" + pkg + "/nfpm.yaml")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			for _, key := range []string{"- src: packaging/", "postinstall: ", "preremove: ", "postremove: "} {
				if rest, ok := strings.CutPrefix(line, key); ok {
					path := rest
					if key == "- src: packaging/" {
						path = "packaging/" + rest
					}
					if _, err := os.Stat("../" + path); err != nil {
						t.Errorf("%s: nfpm.yaml names %s: %v", pkg, path, err)
					}
				}
			}
		}
	}
}

// contents parses the contents list of a package's nfpm.yaml into dst ->
// type ("" for a plain file).
func contents(t *testing.T, pkg string) map[string]string {
	t.Helper()
	b, err := os.ReadFile("deb/" + pkg + "/nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	dst := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "dst: "); ok {
			dst = rest
			out[dst] = ""
		}
		if rest, ok := strings.CutPrefix(line, "type: "); ok && dst != "" {
			out[dst] = rest
		}
		if strings.HasPrefix(line, "- src: ") {
			dst = ""
		}
	}
	return out
}

// Debian policy: a unit under /lib belongs to the package (admins use
// drop-ins), and the flags people change live in a real conffile.
func TestDebConffilesAreTheDefaultsNotTheUnit(t *testing.T) {
	for _, pkg := range debs {
		c := contents(t, pkg)
		unit := "/lib/systemd/system/" + pkg + ".service"
		typ, ok := c[unit]
		if !ok {
			t.Errorf("%s ships no %s", pkg, unit)
		}
		if typ != "" {
			t.Errorf("%s: %s is of type %q, want a plain file", pkg, unit, typ)
		}
		if c["/etc/default/"+pkg] != "config" {
			t.Errorf("%s: /etc/default/%s is not a conffile", pkg, pkg)
		}
		for _, want := range []string{"/usr/share/doc/" + pkg + "/copyright", "/usr/share/doc/" + pkg + "/changelog.gz",
			"/usr/share/man/man1/", "/usr/share/bash-completion/completions/" + pkg,
			"/usr/share/zsh/vendor-completions/_" + pkg, "/usr/share/fish/vendor_completions.d/" + pkg + ".fish"} {
			if _, ok := c[want]; !ok {
				t.Errorf("%s ships no %s", pkg, want)
			}
		}
		// The unit reads the variable the defaults file sets.
		def, err := os.ReadFile("deb/" + pkg + "/default")
		if err != nil {
			t.Fatal(err)
		}
		u, err := os.ReadFile("systemd/" + pkg + ".service")
		if err != nil {
			t.Fatal(err)
		}
		v := strings.ToUpper(strings.ReplaceAll(pkg, "-", "_")) + "_ARGS"
		if !strings.Contains(string(def), "\n"+v+"=") || !strings.Contains(string(u), "$"+v) ||
			!strings.Contains(string(u), "EnvironmentFile=-/etc/default/"+pkg) {
			t.Errorf("%s: the unit does not take %s from /etc/default/%s", pkg, v, pkg)
		}
	}
}

// Maintainer scripts go through deb-systemd-helper and deb-systemd-invoke,
// as debhelper's would; systemctl only reloads. An upgrade must not stop
// the agent (prerm acts on remove only) and must restart it (postinst).
func TestDebMaintainerScripts(t *testing.T) {
	for _, pkg := range debs {
		for _, script := range []string{"postinst", "prerm", "postrm"} {
			b, err := os.ReadFile("deb/" + pkg + "/" + script)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(b), "\n") {
				code, _, _ := strings.Cut(line, "#")
				if strings.HasPrefix(strings.TrimSpace(code), "echo ") {
					continue // advice to the admin, not a call
				}
				if strings.Contains(code, "systemctl") && !strings.Contains(code, "systemctl --system daemon-reload") {
					t.Errorf("%s/%s:%d calls systemctl: %s", pkg, script, i+1, strings.TrimSpace(line))
				}
			}
		}
		prerm, _ := os.ReadFile("deb/" + pkg + "/prerm")
		if !strings.Contains(string(prerm), `[ "$1" = remove ]`) || !strings.Contains(string(prerm), "deb-systemd-invoke stop") {
			t.Errorf("%s prerm does not stop the service on remove only", pkg)
		}
		postinst, _ := os.ReadFile("deb/" + pkg + "/postinst")
		if !strings.Contains(string(postinst), "deb-systemd-invoke restart") {
			t.Errorf("%s postinst does not restart the service on upgrade", pkg)
		}
		postrm, _ := os.ReadFile("deb/" + pkg + "/postrm")
		if !strings.Contains(string(postrm), "rm -rf \"$state\"") || !strings.Contains(string(postrm), "purge)") {
			t.Errorf("%s postrm does not delete its state on purge", pkg)
		}
	}
}

func TestHubUnitIsNotifyAndHardened(t *testing.T) {
	b, err := os.ReadFile("systemd/einsora-hub.service")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, want := range []string{
		"Type=notify", "User=einsora-hub", "StateDirectory=einsora-hub",
		"ExecStart=/usr/bin/einsora-hub serve --data /var/lib/einsora-hub $EINSORA_HUB_ARGS",
		"ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "NoNewPrivileges=yes",
		"CapabilityBoundingSet=", "AmbientCapabilities=",
	} {
		if !lines[want] {
			t.Errorf("hub unit lacks the line %q", want)
		}
	}
}

// The agent's unit starts it only once enrolled, by the certificate that
// enrolment writes: a renamed file would keep the agent from ever starting.
func TestAgentUnitWaitsForTheEnrolmentCertificate(t *testing.T) {
	b, err := os.ReadFile("systemd/einsora-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	want := "ConditionPathExists=/var/lib/einsora-agent/" + agent.CertFile
	if !strings.Contains(string(b), want+"\n") {
		t.Errorf("unit lacks %q", want)
	}
	postinst, err := os.ReadFile("deb/einsora-agent/postinst")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(postinst), `"$state/`+agent.CertFile+`"`) {
		t.Errorf("postinst does not look for %s to tell whether the machine is enrolled", agent.CertFile)
	}
}
