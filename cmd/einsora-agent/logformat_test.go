package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// run --log-format json logs one JSON object a line; an unknown format is
// a usage error.
func TestRunLogFormatJSON(t *testing.T) {
	root := newRoot()
	var errBuf bytes.Buffer
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&errBuf)
	root.SetArgs([]string{"run", "--log-format", "json", "--state-dir", t.TempDir(), "--drivers", "sim"})
	err := root.Execute()
	t.Logf("run: %v", err)
	lines := 0
	sc := bufio.NewScanner(&errBuf)
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "{") {
			continue // cobra's own error line
		}
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec["msg"] == nil {
			t.Errorf("line %q is not a JSON record: %v", sc.Text(), err)
		}
		lines++
	}
	if lines == 0 {
		t.Fatalf("no JSON log lines in %q", errBuf.String())
	}

	root = newRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"run", "--log-format", "yaml"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "want text or json") {
		t.Errorf("--log-format yaml: got %v", err)
	}
}
