package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/internal/cli"
	"einsora.dev/edge/protocol"
)

// specFlags are workload create's flags for the spec.
type specFlags struct {
	command string
	args    []string
	env     []string
	secrets []string
	ports   []string
	workdir string
	volumes []string
	restart string
}

func (f *specFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.command, "command", "", `command and arguments, as shell words (nothing is expanded), e.g. "serve --port 8080"`)
	fl.StringArrayVar(&f.args, "arg", nil, "one more argument, after --command's words (repeatable)")
	fl.StringArrayVar(&f.env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	fl.StringArrayVar(&f.secrets, "secret", nil, "secret environment variable KEY=VALUE, stored encrypted and never shown (repeatable)")
	fl.StringArrayVar(&f.ports, "port", nil, "published port HOST:CONTAINER[/tcp|/udp], closed while parked (repeatable)")
	fl.StringVar(&f.workdir, "workdir", "", "working directory inside the workload (absolute)")
	fl.StringArrayVar(&f.volumes, "volume", nil, "named volume NAME:/path, kept on park, deleted with the workload (repeatable)")
	fl.StringVar(&f.restart, "restart", "", "restart policy: no, on-failure[:N] or always")
}

// spec reads the flags into a spec and checks it, so that bad input is
// refused before anything reaches the hub. Errors name the field and never
// quote a secret.
func (f *specFlags) spec() (protocol.WorkloadSpec, error) {
	var s protocol.WorkloadSpec
	if f.command != "" {
		words, err := protocol.SplitWords(f.command)
		if err != nil {
			return s, cli.Usagef("--command: %v", err)
		}
		s.Command = words
	}
	s.Command = append(s.Command, f.args...)
	var err error
	if s.Env, err = envMap("--env", f.env, nil); err != nil {
		return s, err
	}
	if s.SecretEnv, err = envMap("--secret", f.secrets, s.Env); err != nil {
		return s, err
	}
	for _, p := range f.ports {
		port, err := protocol.ParsePort(p)
		if err != nil {
			return s, cli.Usagef("--port: %v", err)
		}
		s.Ports = append(s.Ports, port)
	}
	s.Workdir = f.workdir
	for _, v := range f.volumes {
		name, path, ok := strings.Cut(v, ":")
		if !ok {
			return s, cli.Usagef("--volume %q: want NAME:/path", v)
		}
		s.Volumes = append(s.Volumes, protocol.Volume{Name: name, Path: path})
	}
	if f.restart != "" {
		if s.Restart, err = protocol.ParseRestart(f.restart); err != nil {
			return s, cli.Usagef("--restart: %v", err)
		}
	}
	if err := s.Validate(); err != nil {
		return s, cli.Usagef("%v", err)
	}
	return s, nil
}

// envMap reads KEY=VALUE words; a key given twice, or also in other, is
// refused.
func envMap(flag string, words []string, other map[string]string) (map[string]string, error) {
	if len(words) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(words))
	for _, w := range words {
		k, v, err := protocol.ParseEnv(w)
		if err != nil {
			return nil, cli.Usagef("%s: %v", flag, err)
		}
		if _, dup := m[k]; dup {
			return nil, cli.Usagef("%s: %s given twice", flag, k)
		}
		if _, dup := other[k]; dup {
			return nil, cli.Usagef("%s: %s is also given with --env", flag, k)
		}
		m[k] = v
	}
	return m, nil
}

// printSpec writes the spec's lines of workload show; secrets only as
// KEY=(secret), whatever the hub answered.
func printSpec(w io.Writer, wl adminapi.Workload) {
	s := wl.WorkloadSpec.Redacted()
	if len(s.Command) > 0 {
		fmt.Fprintf(w, "command:  %s\n", quoteWords(s.Command))
	}
	for _, k := range sortedKeys(s.Env) {
		fmt.Fprintf(w, "env:      %s=%s\n", k, s.Env[k])
	}
	for _, k := range sortedKeys(s.SecretEnv) {
		fmt.Fprintf(w, "secret:   %s=(secret)\n", k)
	}
	for _, p := range s.Ports {
		fmt.Fprintf(w, "port:     %s\n", p)
	}
	if s.Workdir != "" {
		fmt.Fprintf(w, "workdir:  %s\n", s.Workdir)
	}
	for _, v := range s.Volumes {
		fmt.Fprintf(w, "volume:   %s:%s\n", v.Name, v.Path)
	}
	if s.Restart != nil {
		fmt.Fprintf(w, "restart:  %s\n", s.Restart)
	}
}

// quoteWords writes words so that --command reads them back.
func quoteWords(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@%") == "" {
			out[i] = w
			continue
		}
		out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
