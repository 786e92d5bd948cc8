package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// fileConfig is the agent's optional configuration file (--config), JSON.
// A flag given on the command line wins over the file.
type fileConfig struct {
	StateDir string `json:"state_dir"`
	Drivers  string `json:"drivers"`
	// LogLevel is "debug", "info", "warn" or "error".
	LogLevel string `json:"log_level"`
	// DriverTimeout bounds every driver call, e.g. "30s".
	DriverTimeout string `json:"driver_timeout"`
	// DockerHost is the Docker Engine endpoint, as --docker-host.
	DockerHost string `json:"docker_host"`
}

// agentSettings is what run needs, from flags and the file together.
type agentSettings struct {
	stateDir, drivers string
	level             slog.Level
	driverTimeout     time.Duration
	dockerHost        string
}

func loadConfig(path string) (fileConfig, error) {
	var c fileConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("config %s: %w (want a JSON object with state_dir, drivers, log_level, driver_timeout, docker_host)", path, err)
	}
	return c, nil
}

// settings merges the config file under the flags the user set.
func settings(cmd *cobra.Command, path, stateDir, drivers, dockerHost string) (agentSettings, error) {
	s := agentSettings{stateDir: stateDir, drivers: drivers, dockerHost: dockerHost, level: slog.LevelInfo}
	if path == "" {
		return s, nil
	}
	c, err := loadConfig(path)
	if err != nil {
		return s, err
	}
	if c.StateDir != "" && !cmd.Flags().Changed("state-dir") {
		s.stateDir = c.StateDir
	}
	if c.Drivers != "" && !cmd.Flags().Changed("drivers") {
		s.drivers = c.Drivers
	}
	if c.DockerHost != "" && !cmd.Flags().Changed("docker-host") {
		s.dockerHost = c.DockerHost
	}
	if c.LogLevel != "" {
		if err := s.level.UnmarshalText([]byte(c.LogLevel)); err != nil {
			return s, fmt.Errorf("config %s: log_level %q: want debug, info, warn or error", path, c.LogLevel)
		}
	}
	if c.DriverTimeout != "" {
		d, err := time.ParseDuration(c.DriverTimeout)
		if err != nil || d <= 0 {
			return s, fmt.Errorf("config %s: driver_timeout %q: want a duration such as 30s", path, c.DriverTimeout)
		}
		s.driverTimeout = d
	}
	return s, nil
}
