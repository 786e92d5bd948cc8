package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a clock that moves only when told. Timers fire, in order of their
// deadlines, as Advance passes them.
type Fake struct {
	// mu guards the following fields.
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	f.scheduleLocked(t, d)
	return t
}

// AfterFunc runs f in a goroutine of its own when Advance passes d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, fn: fn}
	f.scheduleLocked(t, d)
	return t
}

// Advance moves the clock forward by d, firing every timer it passes.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	sort.Slice(f.timers, func(i, j int) bool { return f.timers[i].when.Before(f.timers[j].when) })
	kept := f.timers[:0]
	for _, t := range f.timers {
		if !t.when.After(f.now) {
			t.fire(f.now)
			continue
		}
		kept = append(kept, t)
	}
	f.timers = kept
}

// Timers returns how many timers are waiting; tests use it to know that a
// goroutine has reached its wait before they advance the clock.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

func (f *Fake) scheduleLocked(t *fakeTimer, d time.Duration) {
	t.when = f.now.Add(d)
	if d <= 0 {
		t.fire(f.now)
		return
	}
	f.timers = append(f.timers, t)
}

func (f *Fake) removeLocked(t *fakeTimer) bool {
	for i, o := range f.timers {
		if o == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			return true
		}
	}
	return false
}

type fakeTimer struct {
	f    *Fake
	c    chan time.Time
	fn   func() // AfterFunc's; c is nil then
	when time.Time
}

// fire sends now on t's channel, or runs its func, as the real timer does.
func (t *fakeTimer) fire(now time.Time) {
	if t.fn != nil {
		go t.fn()
		return
	}
	select {
	case t.c <- now:
	default:
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.removeLocked(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	active := t.f.removeLocked(t)
	t.f.scheduleLocked(t, d)
	return active
}
