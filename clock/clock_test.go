package clock

import (
	"testing"
	"time"
)

func TestFakeFiresTimersInOrderAsTimePasses(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	a, b := f.NewTimer(time.Minute), f.NewTimer(10*time.Second)
	f.Advance(9 * time.Second)
	select {
	case <-b.C():
		t.Fatal("fired early")
	default:
	}
	f.Advance(time.Second)
	if got := <-b.C(); !got.Equal(start.Add(10 * time.Second)) {
		t.Errorf("got %v", got)
	}
	if f.Timers() != 1 {
		t.Errorf("got %d timers waiting, want 1", f.Timers())
	}
	if !a.Stop() || f.Timers() != 0 {
		t.Error("Stop did not remove the timer")
	}
	a.Reset(time.Second)
	f.Advance(time.Second)
	<-a.C()
	if !f.Now().Equal(start.Add(11 * time.Second)) {
		t.Errorf("now is %v", f.Now())
	}
}

func TestFakeAfterFuncRunsOnceItsTimePassesUnlessStopped(t *testing.T) {
	f := NewFake(time.Now())
	ran := make(chan string, 2)
	f.AfterFunc(time.Minute, func() { ran <- "due" })
	stopped := f.AfterFunc(time.Minute, func() { ran <- "stopped" })
	f.Advance(59 * time.Second)
	if !stopped.Stop() {
		t.Fatal("Stop found the timer gone before its time")
	}
	select {
	case got := <-ran:
		t.Fatalf("%s ran before its time", got)
	default:
	}
	f.Advance(time.Second)
	if got := <-ran; got != "due" {
		t.Fatalf("ran %s", got)
	}
	if f.Timers() != 0 {
		t.Errorf("%d timers waiting, want 0", f.Timers())
	}
	select {
	case got := <-ran:
		t.Errorf("%s ran too", got)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestSleepReturnsFalseWhenDone(t *testing.T) {
	f := NewFake(time.Now())
	done := make(chan struct{})
	close(done)
	if Sleep(f, time.Hour, done) {
		t.Error("Sleep reported the full duration though done was closed")
	}
	if !Sleep(f, 0, nil) {
		t.Error("a zero sleep did not complete")
	}
}

func TestLaterIsTheLaterOfTwo(t *testing.T) {
	a := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	b := a.Add(time.Second)
	if got := Later(a, b); !got.Equal(b) {
		t.Errorf("Later(a, b) = %v, want %v", got, b)
	}
	if got := Later(b, a); !got.Equal(b) {
		t.Errorf("Later(b, a) = %v, want %v", got, b)
	}
}
