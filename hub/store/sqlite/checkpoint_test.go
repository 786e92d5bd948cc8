package sqlite

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"einsora.dev/edge/hub/store"
)

// walState reads how many pages the store's log holds and how many of
// them are copied into the database file, from SQLite's shared index of
// the log (the -shm file): the first copy of its header holds the log's
// length at byte 16, and the checkpoint's progress follows both copies of
// the 48-byte header, at byte 96.
func walState(t *testing.T, path string) (logPages, copied uint32) {
	t.Helper()
	b, err := os.ReadFile(path + "-shm")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 100 {
		t.Fatalf("the log's index is %d bytes", len(b))
	}
	return binary.NativeEndian.Uint32(b[16:20]), binary.NativeEndian.Uint32(b[96:100])
}

// openAt opens a store in a new file, closed when the test ends.
func openAt(t *testing.T) (s *Store, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "hub.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestWriterLeavesCheckpointsToTheCheckpointer(t *testing.T) {
	s, path := openAt(t)
	ctx := context.Background()
	// Straight on the writer, so no commit tells the checkpointer: what
	// is copied, the writer copied.
	if _, err := s.writer.ExecContext(ctx, `CREATE TABLE pad (b BLOB)`); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		if _, err := s.writer.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50) INSERT INTO pad (b) SELECT randomblob(3500) FROM n`); err != nil {
			t.Fatal(err)
		}
	}
	logPages, copied := walState(t, path)
	if logPages < 1500 {
		t.Fatalf("the log holds %d pages; the test wants more than SQLite's own threshold of 1,000", logPages)
	}
	if copied != 0 {
		t.Errorf("the writer copied %d of the log's %d pages itself: its commits should leave that to the checkpointer up to %d", copied, logPages, writerCheckpointPages)
	}
}

func TestCheckpointerCopiesTheLogAfterCommits(t *testing.T) {
	s, path := openAt(t)
	ctx := context.Background()
	for i := range 200 {
		if err := s.Update(ctx, func(tx store.Tx) error { return tx.CreateTenant(store.Tenant{Name: fmt.Sprint("t", i)}) }); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		logPages, copied := walState(t, path)
		if logPages > 0 && copied == logPages {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the last commit, %d of the log's %d pages are copied (%d checkpoint passes)", copied, logPages, s.ckpt.passes.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Passes are checkpointGap apart at least, however often the writer
// commits: each costs two fsyncs, which slow the commits beside them.
func TestCheckpointerPassesAreSpaced(t *testing.T) {
	s, _ := openAt(t)
	ctx := context.Background()
	start := time.Now()
	commits := 0
	for time.Since(start) < 3*checkpointGap {
		if err := s.Update(ctx, func(tx store.Tx) error { return tx.CreateTenant(store.Tenant{Name: fmt.Sprint("t", commits)}) }); err != nil {
			t.Fatal(err)
		}
		commits++
	}
	elapsed := time.Since(start)
	// The first pass comes at once, then one a gap at most.
	if passes, most := s.ckpt.passes.Load(), int64(elapsed/checkpointGap)+1; passes > most || passes < 1 {
		t.Errorf("%d commits in %s: %d checkpoint passes, want 1 to %d (one each %s at most)", commits, elapsed.Round(time.Millisecond), passes, most, checkpointGap)
	}
}
