// Package groupcommit gathers the calls that arrive while one batch runs
// into the next batch, so that many callers writing at once share a
// handful of transactions instead of taking one each.
//
// There is no goroutine of its own: the first caller of a batch runs it,
// then hands the lead to the first caller waiting. A caller waits no
// longer than it would have for the writer anyway: a batch starts as soon
// as the one before it ends, with whatever has arrived by then.
package groupcommit

import "sync"

// Queue batches calls carrying a T. The zero Queue takes batches of any
// size.
type Queue[T any] struct {
	// Limit is the most calls a batch takes; 0 is all that wait.
	Limit int
	// mu guards the following fields.
	mu      sync.Mutex
	queue   []*call[T]
	leading bool
}

type call[T any] struct {
	v    T
	done chan struct{}
	// lead is closed to hand this caller the next batch.
	lead chan struct{}
}

// Do queues v and returns once a batch holding it has run: run is given
// the batch's values in the order they arrived, v's among them, and sets
// each one's outcome in it. run must not panic: the callers of its batch
// would wait for ever. Do does not give up on a cancelled caller: its
// value is run anyway, and a caller that left could not take the lead it
// may be handed.
func (q *Queue[T]) Do(v T, run func([]T)) {
	c := &call[T]{v: v, done: make(chan struct{}), lead: make(chan struct{})}
	q.mu.Lock()
	q.queue = append(q.queue, c)
	first := !q.leading
	q.leading = true
	q.mu.Unlock()
	if !first {
		select {
		case <-c.done:
			return
		case <-c.lead:
		}
	}
	q.mu.Lock()
	n := len(q.queue)
	if q.Limit > 0 {
		n = min(n, q.Limit)
	}
	batch := q.queue[:n:n]
	if q.queue = q.queue[n:]; len(q.queue) == 0 {
		q.queue = nil
	}
	q.mu.Unlock()
	vs := make([]T, len(batch))
	for i, b := range batch {
		vs[i] = b.v
	}
	run(vs)
	for _, b := range batch {
		close(b.done)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 {
		q.leading = false
		return
	}
	close(q.queue[0].lead)
}

// Waiting is how many calls wait for a batch to take them.
func (q *Queue[T]) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}
