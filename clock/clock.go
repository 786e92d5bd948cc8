// Package clock lets code read time through an interface, so tests can
// cross ten minutes in a millisecond.
package clock

import "time"

// Clock is the time source. Real is the wall clock; Fake is for tests.
type Clock interface {
	Now() time.Time
	// NewTimer behaves like time.NewTimer.
	NewTimer(d time.Duration) Timer
	// AfterFunc behaves like time.AfterFunc: f runs in a goroutine of its
	// own once d has passed, unless the timer is stopped first. Nothing
	// waits meanwhile (a parked poll's hold). Its timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer that code uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Sleep waits for d on c, or until done is closed. It reports whether the
// full duration passed.
func Sleep(c Clock, d time.Duration, done <-chan struct{}) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}

// Later is the later of a and b.
func Later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
