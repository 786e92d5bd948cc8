package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestConfigFileUnderFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "agent.json")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("file_fills_what_flags_leave", func(t *testing.T) {
		cmd := runCmd()
		path := write(`{"state_dir": "/srv/agent", "drivers": "sim", "log_level": "debug", "driver_timeout": "45s"}`)
		s, err := settings(cmd, path, "/var/lib/einsora-agent", "auto")
		if err != nil {
			t.Fatal(err)
		}
		if s.stateDir != "/srv/agent" || s.drivers != "sim" || s.level != slog.LevelDebug || s.driverTimeout != 45*time.Second {
			t.Errorf("got %+v", s)
		}
	})
	t.Run("flags_win", func(t *testing.T) {
		cmd := runCmd()
		if err := cmd.Flags().Set("drivers", "docker"); err != nil {
			t.Fatal(err)
		}
		s, err := settings(cmd, write(`{"drivers": "sim"}`), "/x", "docker")
		if err != nil || s.drivers != "docker" {
			t.Errorf("got %+v, %v; want the flag's docker", s, err)
		}
	})
	for name, bad := range map[string]string{
		"wrong_type": `{"state_dir": 3}`, "unknown_key": `{"colour": "blue"}`, "bad_level": `{"log_level": "loud"}`,
		"bad_timeout": `{"driver_timeout": "soon"}`, "not_json": `nope`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := settings(runCmd(), write(bad), "/x", "auto"); err == nil {
				t.Errorf("config %s accepted", bad)
			}
		})
	}
}
