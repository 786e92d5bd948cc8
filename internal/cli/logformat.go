package cli

import (
	"fmt"
	"io"
	"log/slog"
)

// LogFormat is the --log-format flag: text (the default, for people) or
// json (one object a line, for log collectors).
type LogFormat string

// The formats LogFormat takes.
const (
	LogText LogFormat = "text"
	LogJSON LogFormat = "json"
)

func (f *LogFormat) String() string {
	if *f == "" {
		return string(LogText)
	}
	return string(*f)
}

// Set refuses anything but text and json, so a typo fails at parse time.
func (f *LogFormat) Set(s string) error {
	switch LogFormat(s) {
	case LogText, LogJSON:
		*f = LogFormat(s)
		return nil
	}
	return fmt.Errorf("log format %q: want text or json", s)
}

// Type names the flag's value in help.
func (f *LogFormat) Type() string { return "text|json" }

// Logger logs at level to w in the format.
func (f LogFormat) Logger(w io.Writer, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if f == LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
