package docker

import (
	"testing"
	"time"

	"einsora.dev/edge/drivers"
)

// waitChange waits for a change notice, failing after a deadline far past
// any engine's latency.
func waitChange(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("no change notice for %s", what)
	}
}

// A container that exits is announced on Changes, so List can be asked at
// once; another machine's driver on the same engine hears nothing of it.
func TestChangesAnnounceAnExit(t *testing.T) {
	imgs := requireImages(t)
	d := newTestDriver(t, Options{Machine: "m-events-own"})
	other := newTestDriver(t, Options{Machine: "m-events-other"})
	ch, otherCh := d.Changes(), other.Changes()
	// Opening the stream is a notice too: changes may have been missed.
	waitChange(t, ch, "the stream's opening")
	waitChange(t, otherCh, "the other stream's opening")

	w := testPrefix + "events-exit"
	removeAtEnd(t, d, w)
	mustStart(t, d, drivers.Spec{Workload: w, Attempt: 1, Image: imgs.exit3})
	for {
		waitChange(t, ch, "the container's exit")
		if inst, ok := listed(t, d, w); ok && inst.State == drivers.StateExited {
			break
		}
	}
	select {
	case <-otherCh:
		t.Error("a driver of another machine was told of this machine's container")
	default:
	}
}

// Close ends the event stream: the watcher is among what Close waits for.
func TestChangesEndWithClose(t *testing.T) {
	requireEngine(t)
	d, err := New(Options{StateDir: t.TempDir(), Logger: newTestDriverLogger()})
	if err != nil {
		t.Fatal(err)
	}
	d.Changes()
	done := make(chan error, 1)
	go func() { done <- d.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not end the event stream")
	}
}
