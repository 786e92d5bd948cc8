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
		path := write(`{"state_dir": "/srv/agent", "drivers": "sim", "log_level": "debug", "driver_timeout": "45s", "docker_host": "unix:///Users/a/.colima/default/docker.sock"}`)
		s, err := settings(cmd, path, "/var/lib/einsora-agent", "auto", "")
		if err != nil {
			t.Fatal(err)
		}
		if s.stateDir != "/srv/agent" || s.drivers != "sim" || s.level != slog.LevelDebug || s.driverTimeout != 45*time.Second ||
			s.dockerHost != "unix:///Users/a/.colima/default/docker.sock" {
			t.Errorf("got %+v", s)
		}
	})
	t.Run("flags_win", func(t *testing.T) {
		cmd := runCmd()
		if err := cmd.Flags().Set("drivers", "docker"); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Flags().Set("docker-host", "tcp://127.0.0.1:2375"); err != nil {
			t.Fatal(err)
		}
		s, err := settings(cmd, write(`{"drivers": "sim", "docker_host": "unix:///x.sock"}`), "/x", "docker", "tcp://127.0.0.1:2375")
		if err != nil || s.drivers != "docker" || s.dockerHost != "tcp://127.0.0.1:2375" {
			t.Errorf("got %+v, %v; want the flags' docker and tcp://127.0.0.1:2375", s, err)
		}
	})
	for name, bad := range map[string]string{
		"wrong_type": `{"state_dir": 3}`, "unknown_key": `{"colour": "blue"}`, "bad_level": `{"log_level": "loud"}`,
		"bad_timeout": `{"driver_timeout": "soon"}`, "not_json": `nope`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := settings(runCmd(), write(bad), "/x", "auto", ""); err == nil {
				t.Errorf("config %s accepted", bad)
			}
		})
	}
}
