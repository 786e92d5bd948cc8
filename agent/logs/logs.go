// Package logs keeps each workload's recent output on the agent's disk, in
// a bounded ring per workload, and serves it: Read for a tail, Follow for
// what comes next. It is what POST /agent/v1/logs will stream from (the
// upload itself comes later): a reader of Follow writes entries to the
// request body as they come, never holding more than its channel.
//
// A workload's ring is two files of JSON lines, NAME.0 (being written) and
// NAME.1 (the previous one). When NAME.0 would pass half the bound it
// replaces NAME.1 and a fresh NAME.0 begins, so the ring never holds more
// than the bound and always holds at least the last half of it.
//
// The text is the workload's own and untrusted: lines are cut at MaxLine,
// made valid UTF-8, and never interpreted.
package logs

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"einsora.dev/edge/clock"
)

// Stream names where a line came from.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
	// System lines are the agent's or the driver's own word about the
	// workload (the sim driver's state changes, lines dropped).
	System Stream = "system"
)

// Entry is one line of output.
type Entry struct {
	Time   time.Time `json:"t"`
	Stream Stream    `json:"s"`
	Line   string    `json:"l"`
}

// Defaults and bounds.
const (
	// DefaultMaxBytes bounds one workload's ring on disk.
	DefaultMaxBytes = 10 << 20
	// MinMaxBytes is the least bound Options may set: half of it holds
	// the largest entry (a MaxLine line of characters JSON escapes six
	// bytes each), so the bound holds exactly.
	MinMaxBytes = 256 << 10
	// MaxLine bounds one line; longer ones are cut and marked.
	MaxLine = 16 << 10
	// FollowBuffer is how many entries a follower may lag behind before
	// lines are dropped for it (and a System line says how many).
	FollowBuffer = 1024
	// WriteBuffer is how much output is gathered before a write to disk.
	WriteBuffer = 64 << 10
)

// Options configure a Store.
type Options struct {
	// MaxBytes bounds each workload's ring; 0 means DefaultMaxBytes.
	MaxBytes int64
	Clock    clock.Clock
}

// Store holds the rings of every workload under one directory. Its methods
// are safe for concurrent use.
type Store struct {
	dir string
	max int64
	clk clock.Clock

	mu    sync.Mutex
	rings map[string]*ring
}

type ring struct {
	f *os.File // NAME.0, open for append
	// w buffers writes to f: one write per WriteBuffer, not per line.
	// Every read flushes it first, so readers see every line; a crash
	// loses at most what it holds.
	w         *bufio.Writer
	size      int64
	last      time.Time // time of the newest entry
	followers map[*follower]struct{}
}

type follower struct {
	ch      chan Entry
	dropped int
}

// Open returns a store over dir, making it if needed.
func Open(dir string, o Options) (*Store, error) {
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxBytes < MinMaxBytes {
		return nil, fmt.Errorf("logs: bound of %d bytes is under the least, %d", o.MaxBytes, MinMaxBytes)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("logs: %w", err)
	}
	return &Store{dir: dir, max: o.MaxBytes, clk: o.Clock, rings: map[string]*ring{}}, nil
}

// Close closes every open file and ends every Follow.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for w, r := range s.rings {
		errs = append(errs, r.close())
		delete(s.rings, w)
	}
	return errors.Join(errs...)
}

func (r *ring) close() error {
	for f := range r.followers {
		close(f.ch)
	}
	r.followers = nil
	if r.f == nil {
		return nil
	}
	err := errors.Join(r.w.Flush(), r.f.Close())
	r.f, r.w = nil, nil
	return err
}

// base is the path of a workload's files without the suffix: a hash, so
// any workload ID makes a safe file name.
func (s *Store) base(workload string) string {
	sum := sha256.Sum256([]byte(workload))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:16]))
}

// ringLocked returns the workload's ring, opening its file.
func (s *Store) ringLocked(workload string) (*ring, error) {
	if r := s.rings[workload]; r != nil && r.f != nil {
		return r, nil
	}
	r := s.rings[workload]
	if r == nil {
		r = &ring{followers: map[*follower]struct{}{}}
	}
	f, err := os.OpenFile(s.base(workload)+".0", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("logs: open %s: %w", workload, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("logs: open %s: %w", workload, err)
	}
	r.f, r.w, r.size = f, bufio.NewWriterSize(f, WriteBuffer), st.Size()
	if r.last.IsZero() {
		if es, err := s.readFiles(workload); err == nil && len(es) > 0 {
			r.last = es[len(es)-1].Time
		}
	}
	s.rings[workload] = r
	return r, nil
}

// Append adds one entry to the workload's ring, stamping it now if its time
// is zero, cutting its line at MaxLine and dropping a final newline.
func (s *Store) Append(workload string, e Entry) error {
	if e.Time.IsZero() {
		e.Time = s.clk.Now()
	}
	e.Time = e.Time.UTC()
	e.Line = cleanLine(e.Line)
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("logs: encode: %w", err)
	}
	b = append(b, '\n')
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.ringLocked(workload)
	if err != nil {
		return err
	}
	if r.size > 0 && r.size+int64(len(b)) > s.max/2 {
		if err := s.rotateLocked(workload, r); err != nil {
			return err
		}
	}
	if _, err := r.w.Write(b); err != nil {
		return fmt.Errorf("logs: write %s: %w", workload, err)
	}
	r.size += int64(len(b))
	if e.Time.After(r.last) {
		r.last = e.Time
	}
	for f := range r.followers {
		f.send(e, s.clk)
	}
	return nil
}

// send delivers e without ever blocking the writer: a follower that lags
// loses lines and is told how many once it catches up.
func (f *follower) send(e Entry, clk clock.Clock) {
	if f.dropped > 0 {
		note := Entry{Time: clk.Now().UTC(), Stream: System, Line: fmt.Sprintf("%d lines dropped: the reader fell behind", f.dropped)}
		select {
		case f.ch <- note:
			f.dropped = 0
		default:
			f.dropped++
			return
		}
	}
	select {
	case f.ch <- e:
	default:
		f.dropped++
	}
}

func (s *Store) rotateLocked(workload string, r *ring) error {
	if err := errors.Join(r.w.Flush(), r.f.Close()); err != nil {
		return fmt.Errorf("logs: rotate %s: %w", workload, err)
	}
	r.f, r.w = nil, nil
	base := s.base(workload)
	if err := os.Rename(base+".0", base+".1"); err != nil {
		return fmt.Errorf("logs: rotate %s: %w", workload, err)
	}
	f, err := os.OpenFile(base+".0", os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("logs: rotate %s: %w", workload, err)
	}
	r.f, r.w, r.size = f, bufio.NewWriterSize(f, WriteBuffer), 0
	return nil
}

// cleanLine cuts a line at MaxLine (marking the cut), drops one final
// newline and makes it valid UTF-8.
func cleanLine(l string) string {
	l = strings.TrimSuffix(l, "\n")
	if len(l) > MaxLine {
		l = l[:MaxLine] + " [cut]"
	}
	return strings.ToValidUTF8(l, "\uFFFD")
}

// Last is the time of the workload's newest entry, zero when it has none:
// where a source that can replay from a time resumes.
func (s *Store) Last(workload string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.rings[workload]; r != nil && !r.last.IsZero() {
		return r.last
	}
	es, err := s.readFiles(workload)
	if err != nil || len(es) == 0 {
		return time.Time{}
	}
	return es[len(es)-1].Time
}

// Read returns the workload's entries at or after since (zero: all), the
// last tail of them (0: all), oldest first. A workload without output has
// none.
func (s *Store) Read(workload string, tail int, since time.Time) ([]Entry, error) {
	s.mu.Lock()
	es, err := s.readFiles(workload)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !since.IsZero() {
		i := 0
		for i < len(es) && es[i].Time.Before(since) {
			i++
		}
		es = es[i:]
	}
	if tail > 0 && len(es) > tail {
		es = es[len(es)-tail:]
	}
	return es, nil
}

// readFiles reads NAME.1 then NAME.0, after writing out what is buffered.
// A line that does not decode (a write cut short by a crash) is skipped.
func (s *Store) readFiles(workload string) ([]Entry, error) {
	if r := s.rings[workload]; r != nil && r.w != nil {
		if err := r.w.Flush(); err != nil {
			return nil, fmt.Errorf("logs: read %s: %w", workload, err)
		}
	}
	var out []Entry
	for _, suffix := range []string{".1", ".0"} {
		f, err := os.Open(s.base(workload) + suffix)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("logs: read %s: %w", workload, err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 8*MaxLine)
		for sc.Scan() {
			var e Entry
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				out = append(out, e)
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("logs: read %s: %w", workload, err)
		}
	}
	return out, nil
}

// Follow returns the workload's entries from now on, as they are appended.
// The channel is closed when ctx ends, the workload's ring is removed or
// the store is closed. A reader that lags more than FollowBuffer entries
// loses lines and then reads a System line saying how many.
func (s *Store) Follow(ctx context.Context, workload string) (<-chan Entry, error) {
	s.mu.Lock()
	r, err := s.ringLocked(workload)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	f := &follower{ch: make(chan Entry, FollowBuffer)}
	r.followers[f] = struct{}{}
	s.mu.Unlock()
	go func() {
		<-ctx.Done()
		s.mu.Lock()
		defer s.mu.Unlock()
		if r := s.rings[workload]; r != nil {
			if _, ok := r.followers[f]; ok {
				delete(r.followers, f)
				close(f.ch)
			}
		}
	}()
	return f.ch, nil
}

// Remove deletes the workload's ring and ends its followers: its output
// goes with the workload.
func (s *Store) Remove(workload string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if r := s.rings[workload]; r != nil {
		errs = append(errs, r.close())
		delete(s.rings, workload)
	}
	for _, suffix := range []string{".0", ".1"} {
		if err := os.Remove(s.base(workload) + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("logs: remove %s: %w", workload, err)
	}
	return nil
}
