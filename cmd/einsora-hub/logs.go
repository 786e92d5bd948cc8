package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/internal/cli"
	"einsora.dev/edge/protocol"
)

func logsCmd(g *globals) *cobra.Command {
	var o adminapi.LogOptions
	var since time.Duration
	c := &cobra.Command{Use: "logs ID", Short: "Print a workload's output (stdout, stderr and the agent's own lines)", Args: cli.Args(cobra.ExactArgs(1))}
	c.Flags().BoolVarP(&o.Follow, "follow", "f", false, "keep printing lines as they come, until the workload is removed or you interrupt")
	c.Flags().IntVar(&o.Tail, "tail", 0, "print only the last N lines kept (0: all)")
	c.Flags().DurationVar(&since, "since", 0, "print only lines of the last DURATION, e.g. 10m")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if o.Tail < 0 {
			return cli.Usagef("--tail %d: want 0 or more lines", o.Tail)
		}
		if since < 0 {
			return cli.Usagef("--since %s: want a positive duration", since)
		}
		if since > 0 {
			o.Since = time.Now().Add(-since)
		}
		cl, err := g.client()
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		escape := isTerminal(out)
		return cl.Logs(cmd.Context(), args[0], o, func(l protocol.LogLine) error {
			_, err := fmt.Fprintln(out, formatLogLine(l, escape))
			return err
		})
	}
	return c
}

// formatLogLine is "TIME STREAM LINE". The line is the workload's own,
// untrusted text: on a terminal its control characters are escaped, so
// that no output can move the cursor, retitle the window or hide a line.
func formatLogLine(l protocol.LogLine, escape bool) string {
	line, stream := l.Line, l.Stream
	if escape {
		line, stream = escapeControl(line), escapeControl(stream)
	}
	return l.Time.Local().Format("2006-01-02T15:04:05.000Z07:00") + " " + stream + " " + line
}

// escapeControl writes control characters (but tab) and invalid UTF-8 as
// Go escapes.
func escapeControl(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteRune(r)
		case r == '\\':
			b.WriteString(`\\`)
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
