package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestLogFormat(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want LogFormat
		bad  bool
	}{
		{nil, "", false},
		{[]string{"--log-format", "json"}, LogJSON, false},
		{[]string{"--log-format=text"}, LogText, false},
		{[]string{"--log-format", "yaml"}, "", true},
	} {
		var f LogFormat
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.SetOutput(&bytes.Buffer{})
		fs.Var(&f, "log-format", "")
		err := fs.Parse(tt.args)
		if (err != nil) != tt.bad || f != tt.want {
			t.Errorf("%v: got %q, %v", tt.args, f, err)
		}
	}

	var buf bytes.Buffer
	LogJSON.Logger(&buf, slog.LevelInfo).Info("hub started", "region", "eu", "quote", `a "b"`)
	LogJSON.Logger(&buf, slog.LevelInfo).Debug("left out")
	LogJSON.Logger(&buf, slog.LevelInfo).Warn("second")
	sc := bufio.NewScanner(&buf)
	n := 0
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		if rec["msg"] == nil || rec["level"] == nil || rec["time"] == nil {
			t.Errorf("line %q lacks msg, level or time", sc.Text())
		}
		n++
	}
	if n != 2 {
		t.Errorf("%d JSON lines, want 2", n)
	}
	buf.Reset()
	LogText.Logger(&buf, slog.LevelInfo).Info("hub started")
	if !strings.HasPrefix(buf.String(), "time=") {
		t.Errorf("text format wrote %q", buf.String())
	}
}
