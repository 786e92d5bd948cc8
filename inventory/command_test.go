package inventory

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestExecRunner(t *testing.T) {
	for _, tool := range []string{"sh", "sleep"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s here", tool)
		}
	}
	tests := []struct {
		name    string
		timeout time.Duration
		args    []string
		want    string
		wantErr string
		absent  bool
	}{
		{"output", time.Second, []string{"sh", "-c", "echo hello"}, "hello\n", "", false},
		{"failure_with_stderr", time.Second, []string{"sh", "-c", "echo broken >&2; exit 3"}, "", "sh: exit status 3: broken", false},
		{"timeout", 50 * time.Millisecond, []string{"sleep", "5"}, "", "sleep: timed out after 50ms", false},
		// A grandchild holding stdout must not hold the probe.
		{"timeout_with_grandchild", 50 * time.Millisecond, []string{"sh", "-c", "sleep 5 & sleep 5"}, "", "sh: timed out after 50ms", false},
		{"not_installed", time.Second, []string{"einsora-no-such-tool"}, "", "einsora-no-such-tool", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			out, err := execRunner(context.Background(), tt.timeout, tt.args[0], tt.args[1:]...)
			if took := time.Since(start); took > tt.timeout+time.Second {
				t.Errorf("took %v, want under %v", took, tt.timeout+time.Second)
			}
			if string(out) != tt.want {
				t.Errorf("got output %q, want %q", out, tt.want)
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("got error %v, want one containing %q", err, tt.wantErr)
			}
			if errors.Is(err, errAbsent) != tt.absent {
				t.Errorf("got absent %v, want %v", errors.Is(err, errAbsent), tt.absent)
			}
		})
	}
}

func TestCappedBuffer(t *testing.T) {
	b := &cappedBuffer{max: 4}
	b.Write([]byte("abc"))
	b.Write([]byte("def"))
	if got := b.String(); got != "abcd" || !b.overflow {
		t.Errorf("got %q overflow %v, want %q overflow true", got, b.overflow, "abcd")
	}
}
