package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"einsora.dev/edge/drivers"
)

// FollowLogs sends the output of w's container written after since (zero:
// all the engine kept) to emit, read through the Engine API's log stream
// (follow, with timestamps) and demultiplexed into stdout and stderr. It
// returns when the container stops, it is removed, or ctx ends; a workload
// without a container has no output. Each line carries the engine's
// timestamp, so a caller resuming from its newest line loses nothing and
// repeats nothing.
func (d *Driver) FollowLogs(ctx context.Context, w string, since time.Time, emit func(drivers.LogLine)) error {
	c, err := d.inspect(ctx, w)
	if err != nil {
		return fmt.Errorf("docker: logs %s: %w", w, err)
	}
	if c == nil {
		return nil
	}
	opts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: true, Timestamps: true}
	if !since.IsZero() {
		opts.Since = fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond())
	}
	// No call timeout: a follow lasts as long as the container runs.
	rc, err := d.cli.ContainerLogs(ctx, c.ID, opts)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("docker: logs %s: %w", w, d.wrap(ctx, "container logs", err))
	}
	defer rc.Close()
	stamp := func(stream string) *drivers.LineSplitter {
		return &drivers.LineSplitter{Stream: stream, Now: time.Now, Emit: func(l drivers.LogLine) {
			if l = engineStamped(l); l.Time.After(since) {
				emit(l)
			}
		}}
	}
	out, errOut := stamp(drivers.LogStdout), stamp(drivers.LogStderr)
	_, err = stdcopy.StdCopy(out, errOut, rc)
	out.Close()
	errOut.Close()
	if err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
		return fmt.Errorf("docker: logs %s: %w", w, err)
	}
	return nil
}

// engineStamped takes the engine's RFC 3339 timestamp off the front of a
// line. A line cut at MaxLogLine continues without one; it keeps the time
// it was read at.
func engineStamped(l drivers.LogLine) drivers.LogLine {
	ts, rest, _ := strings.Cut(l.Line, " ")
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return l
	}
	l.Time, l.Line = t, rest
	return l
}
