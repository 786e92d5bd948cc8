package groupcommit

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder runs batches, noting each one's values; the first batch waits
// for gate, so that the calls after it queue.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	gate    chan struct{}
}

func (r *recorder) run(vs []int) {
	r.mu.Lock()
	first := len(r.batches) == 0
	r.batches = append(r.batches, slices.Clone(vs))
	r.mu.Unlock()
	if first {
		<-r.gate
	}
}

// lineUp starts a first call, held in its batch, then n more, and
// releases the first once all n wait.
func lineUp(t *testing.T, q *Queue[int], r *recorder, n int) {
	t.Helper()
	var calls sync.WaitGroup
	calls.Go(func() { q.Do(0, r.run) })
	for r.count() == 0 {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i <= n; i++ {
		calls.Go(func() { q.Do(i, r.run) })
	}
	waitFor(t, func() bool { return q.Waiting() == n })
	close(r.gate)
	calls.Wait()
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.batches)
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// sizes and values of the batches run.
func (r *recorder) sizes() (sizes, values []int) {
	for _, b := range r.batches {
		sizes = append(sizes, len(b))
		values = append(values, b...)
	}
	slices.Sort(values)
	return sizes, values
}

func TestCallsArrivingTogetherShareABatch(t *testing.T) {
	var q Queue[int]
	r := &recorder{gate: make(chan struct{})}
	lineUp(t, &q, r, 20)
	sizes, values := r.sizes()
	if !slices.Equal(sizes, []int{1, 20}) {
		t.Errorf("batches of %v, want [1 20]: the first alone, then all that queued behind it", sizes)
	}
	if want := seq(21); !slices.Equal(values, want) {
		t.Errorf("values run %v, want each of %v once", values, want)
	}
	if q.Waiting() != 0 {
		t.Errorf("%d calls still waiting", q.Waiting())
	}
}

func TestBatchesKeepToTheirLimit(t *testing.T) {
	q := Queue[int]{Limit: 4}
	r := &recorder{gate: make(chan struct{})}
	lineUp(t, &q, r, 18)
	sizes, values := r.sizes()
	if !slices.Equal(sizes, []int{1, 4, 4, 4, 4, 2}) {
		t.Errorf("batches of %v, want [1 4 4 4 4 2]", sizes)
	}
	if want := seq(19); !slices.Equal(values, want) {
		t.Errorf("values run %v, want each of %v once", values, want)
	}
}

// The caller that ran a batch returns once its own is done: the next
// batch is run by a caller in it, not by the one before.
func TestTheLeadPassesToACallerWaiting(t *testing.T) {
	var q Queue[int]
	first, second := make(chan struct{}), make(chan struct{})
	firstDone := make(chan struct{})
	run := func(vs []int) {
		if vs[0] == 0 {
			<-first
		} else {
			<-second
		}
	}
	go func() {
		q.Do(0, run)
		close(firstDone)
	}()
	waitFor(t, func() bool { q.mu.Lock(); defer q.mu.Unlock(); return q.leading })
	secondDone := make(chan struct{})
	go func() {
		q.Do(1, run)
		close(secondDone)
	}()
	waitFor(t, func() bool { return q.Waiting() == 1 })
	close(first)
	select {
	case <-firstDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the first caller did not return while the next batch ran: it kept the lead")
	}
	close(second)
	<-secondDone
	// And the queue is free again: a new call leads at once.
	done := make(chan struct{})
	go func() { q.Do(2, func([]int) {}); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a call after the batches ended never ran")
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
