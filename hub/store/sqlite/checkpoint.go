package sqlite

import (
	"context"
	"database/sql"
	"sync/atomic"
	"time"
)

// writerCheckpointPages is the log length at which the writer copies the
// log back into the database file itself, in the commit that passes it.
// SQLite's default is 1,000 pages; then every such commit paid two fsyncs
// on the one writer, and every write queued behind it waited: the tail of
// a change's wake (docs/performance.md, "Checkpoints beside the writer").
// The checkpointer below copies the log after commits instead, so only a
// log it could not keep up with reaches this length, and then little of
// it is left to copy. Under 4,096 pages the log's index stays in one
// segment, which every read searches.
const writerCheckpointPages = 4000

// checkpointGap is the least time between two passes, so that commits are
// copied in batches: each pass costs two fsyncs, and the commits beside
// them wait longer. At 25 ms a steady flow of changes (20 a second) paid
// a pass for nearly every change: a third more CPU a change, and a fifth
// to a quarter on their wakes (docs/performance.md, "Changes at a steady
// pace"). The writer's own checkpoint at writerCheckpointPages still
// bounds the log in a burst.
const checkpointGap = 250 * time.Millisecond

// checkpointer copies the write-ahead log back into the database file on
// a connection of its own, after commits: PASSIVE, so it never waits on
// the writer or a reader, nor they on it. Once all the log is copied, the
// writer's next transaction starts the log over from its beginning.
type checkpointer struct {
	db     *sql.DB
	commit chan struct{} // a commit since the last pass; holds one
	stop   context.CancelFunc
	done   chan struct{}
	// passes counts the passes run. A pass that fails leaves the log to
	// the next pass, or to the writer: an error of the disk under it
	// fails the writer's commits too, and those are said to the caller.
	passes atomic.Int64
}

func startCheckpointer(db *sql.DB) *checkpointer {
	ctx, stop := context.WithCancel(context.Background())
	c := &checkpointer{db: db, commit: make(chan struct{}, 1), stop: stop, done: make(chan struct{})}
	go c.run(ctx)
	return c
}

// committed tells the checkpointer the log grew. It never blocks: commits
// that come while a pass runs are all covered by the next.
func (c *checkpointer) committed() {
	select {
	case c.commit <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run(ctx context.Context) {
	defer close(c.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.commit:
		}
		c.pass(ctx)
		c.passes.Add(1)
		gap := time.NewTimer(checkpointGap)
		select {
		case <-ctx.Done():
			gap.Stop()
			return
		case <-gap.C:
		}
	}
}

// pass copies what the log holds that no reader still needs.
func (c *checkpointer) pass(ctx context.Context) {
	var busy, logPages, copied int
	c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &logPages, &copied)
}

// close stops the checkpointer, waits for a pass under way, and closes its
// connection.
func (c *checkpointer) close() error {
	c.stop()
	<-c.done
	return c.db.Close()
}
