package inventory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// runner runs an external command under a time limit and returns its
// standard output. A command that is not installed gives an error wrapping
// errAbsent.
type runner func(ctx context.Context, timeout time.Duration, name string, args ...string) ([]byte, error)

// maxOutput bounds what a command may print: nvidia-smi -q -x for eight
// GPUs is about 200 KiB.
const maxOutput = 8 << 20

func execRunner(ctx context.Context, timeout time.Duration, name string, args ...string) ([]byte, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, absent(name)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	stdout := &cappedBuffer{max: maxOutput}
	stderr := &cappedBuffer{max: 512}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// A child that leaves a grandchild holding the pipes must not hold the
	// probe past its limit.
	cmd.WaitDelay = 100 * time.Millisecond
	err = cmd.Run()
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, fmt.Errorf("%s: timed out after %v", name, timeout)
	case err != nil:
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		if first, _, ok := strings.Cut(msg, "\n"); ok {
			msg = first
		}
		if msg != "" {
			return nil, fmt.Errorf("%s: %w: %s", name, err, truncate(msg, 120))
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	case stdout.overflow:
		return nil, fmt.Errorf("%s: output over %d bytes", name, maxOutput)
	}
	return stdout.Bytes(), nil
}

// cappedBuffer keeps the first max bytes written and drops the rest, so a
// runaway command cannot fill memory.
type cappedBuffer struct {
	bytes.Buffer
	max      int
	overflow bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.overflow = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

func osHostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}
