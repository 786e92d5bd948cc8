// Package packaging holds the service units and package definitions; its
// test checks that they name what the agent actually takes.
package packaging

import (
	"encoding/xml"
	"os"
	"strings"
	"testing"
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

func TestDebContentsExist(t *testing.T) {
	b, err := os.ReadFile("deb/nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		for _, key := range []string{"- src: packaging/", "postinstall: ", "preremove: "} {
			if rest, ok := strings.CutPrefix(line, key); ok {
				path := rest
				if key == "- src: packaging/" {
					path = "packaging/" + rest
				}
				if _, err := os.Stat("../" + path); err != nil {
					t.Errorf("nfpm.yaml names %s: %v", path, err)
				}
			}
		}
	}
}
