package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serve --log-format json logs one JSON object a line; an unknown format
// is refused at parse time.
func TestServeLogFormatJSON(t *testing.T) {
	// A data directory open to others makes serve log a warning as it
	// narrows it; the unusable admin port then ends it.
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	root := newRoot()
	root.SilenceErrors, root.SilenceUsage = true, true
	var errBuf bytes.Buffer
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&errBuf)
	root.SetArgs([]string{"serve", "--log-format", "json", "--data", data, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:99999"})
	if err := root.Execute(); err == nil {
		t.Fatal("serve with admin port 99999 did not fail")
	}
	lines := 0
	sc := bufio.NewScanner(&errBuf)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec["msg"] == nil {
			t.Errorf("line %q is not a JSON record: %v", sc.Text(), err)
		}
		lines++
	}
	if lines == 0 {
		t.Fatal("no log lines")
	}

	for _, sub := range []string{"serve", "solo"} {
		root = newRoot()
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		root.SetArgs([]string{sub, "--log-format", "yaml"})
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "want text or json") {
			t.Errorf("%s --log-format yaml: got %v", sub, err)
		}
	}
}
