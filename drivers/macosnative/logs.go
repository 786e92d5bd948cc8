package macosnative

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"einsora.dev/edge/drivers"
)

const (
	// LogPoll is how often FollowLogs reads the output files.
	LogPoll = 100 * time.Millisecond
	// MaxLogFile bounds an output file while it is followed: once a
	// follower has read past it, the file is emptied (the process writes
	// with O_APPEND, so it goes on at the new end). What the process
	// writes between that read and the truncation is lost; the agent's
	// log ring holds what was read.
	MaxLogFile = 1 << 20
)

// tailFile is one output file being followed.
type tailFile struct {
	path   string
	f      *os.File
	offset int64
	split  *drivers.LineSplitter
}

// FollowLogs sends the workload's stdout and stderr to emit as the process
// writes them, each line stamped when read, and returns once the process
// is gone (after reading what it left) or ctx ends. With since zero it
// begins at the start of the files; otherwise at their end, since the
// files carry no times to resume from: output written while nobody
// followed is then not sent, though it stays in the files.
func (d *Driver) FollowLogs(ctx context.Context, workload string, since time.Time, emit func(drivers.LogLine)) error {
	d.mu.Lock()
	_, err := d.load(workload)
	d.mu.Unlock()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("macos-native: logs %s: %w", workload, err)
	}
	tails := []*tailFile{
		{path: d.LogPath(workload), split: &drivers.LineSplitter{Stream: drivers.LogStdout, Now: time.Now, Emit: emit}},
		{path: d.StderrPath(workload), split: &drivers.LineSplitter{Stream: drivers.LogStderr, Now: time.Now, Emit: emit}},
	}
	defer func() {
		for _, t := range tails {
			if t.f != nil {
				t.f.Close()
			}
		}
	}()
	for _, t := range tails {
		if !since.IsZero() {
			if st, err := os.Stat(t.path); err == nil {
				t.offset = st.Size()
			}
		}
	}
	tick := time.NewTicker(LogPoll)
	defer tick.Stop()
	for {
		d.mu.Lock()
		r, err := d.load(workload)
		live := err == nil && r.Failed == "" && d.liveLocked(r)
		d.mu.Unlock()
		for _, t := range tails {
			if err := t.read(); err != nil {
				return fmt.Errorf("macos-native: logs %s: %w", workload, err)
			}
		}
		if !live {
			for _, t := range tails {
				t.split.Close()
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// read sends what was appended since the last read, and empties a file
// read past MaxLogFile.
func (t *tailFile) read() error {
	if t.f == nil {
		f, err := os.OpenFile(t.path, os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		t.f = f
	}
	st, err := t.f.Stat()
	if err != nil {
		return err
	}
	if st.Size() < t.offset {
		t.offset = 0 // emptied by someone else
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := t.f.ReadAt(buf, t.offset)
		t.split.Write(buf[:n])
		t.offset += int64(n)
		if errors.Is(err, io.EOF) || n == 0 {
			break
		}
		if err != nil {
			return err
		}
	}
	if t.offset > MaxLogFile {
		if err := t.f.Truncate(0); err != nil {
			return err
		}
		t.offset = 0
	}
	return nil
}
