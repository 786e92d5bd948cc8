// Package cli holds what both commands share: exit codes, usage errors,
// JSON output, and the default directories.
package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes, the same for every command.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
)

// UsageError is bad usage: the command line itself is wrong.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef makes a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Exec runs root and turns its error into an exit code, in one place: the
// error is printed as one line on stderr.
func Exec(root *cobra.Command, stderr io.Writer) int {
	root.SilenceUsage, root.SilenceErrors = true, true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &UsageError{Err: err} })
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	// One line, whatever the error holds: scripts read the last line.
	fmt.Fprintf(stderr, "%s: %s\n", root.Name(), strings.Join(strings.Fields(err.Error()), " "))
	var ue *UsageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return ExitUsage
	}
	return ExitFail
}

// isCobraUsage catches cobra's own usage errors (unknown command, wrong
// number of arguments), which it does not type.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires at least", "unknown flag", "unknown shorthand", "flag needs an argument", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// Args wraps a cobra argument validator so its errors are usage errors.
func Args(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return &UsageError{Err: err}
		}
		return nil
	}
}

// PrintJSON writes v as indented JSON.
func PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// DefaultHubDataDir is the per-user data directory of the hub: XDG on
// Linux, Application Support on macOS.
func DefaultHubDataDir() string {
	if runtime.GOOS == "darwin" {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, "Library", "Application Support", "Einsora", "hub")
		}
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "einsora", "hub")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "einsora", "hub")
	}
	return "einsora-hub-data"
}

// DarwinAgentStateDir is the agent's one state directory on macOS: enroll,
// run, doctor, the launchd plist and the brew service all use it.
const DarwinAgentStateDir = "/Library/Application Support/Einsora/agent"

// DefaultAgentStateDir is the system agent's state directory.
func DefaultAgentStateDir() string {
	if runtime.GOOS == "darwin" {
		return DarwinAgentStateDir
	}
	return "/var/lib/einsora-agent"
}
