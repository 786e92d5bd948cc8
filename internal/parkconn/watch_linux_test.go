//go:build linux

package parkconn

import (
	"net"
	"testing"
	"time"
)

// pair is a loopback TCP connection: the server's side and the client's.
func pair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// The watcher tells at once when a watched connection's peer closes it or
// sends anything, and never after its unwatch.
func TestWatcherTellsWhenThePeerHasGoneAndNotAfterUnwatch(t *testing.T) {
	w, err := NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	gone := make(chan string, 3)
	watch := func(c net.Conn, name string) func() {
		unwatch, err := w.Watch(c, func() { gone <- name })
		if err != nil {
			t.Fatal(err)
		}
		return unwatch
	}
	closedS, closedC := pair(t)
	sentS, sentC := pair(t)
	keptS, keptC := pair(t)
	watch(closedS, "closed")
	watch(sentS, "sent")
	unwatch := watch(keptS, "unwatched")
	if w.Watching() != 3 {
		t.Fatalf("watching %d; want 3", w.Watching())
	}
	select {
	case name := <-gone:
		t.Fatalf("%s told gone while its peer waits", name)
	case <-time.After(50 * time.Millisecond):
	}
	unwatch()
	keptC.Close()
	closedC.Close()
	sentC.Write([]byte("x"))
	got := map[string]bool{}
	for range 2 {
		select {
		case name := <-gone:
			got[name] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("told only %v; want closed and sent", got)
		}
	}
	if !got["closed"] || !got["sent"] {
		t.Errorf("told %v; want closed and sent", got)
	}
	select {
	case name := <-gone:
		t.Errorf("%s told too", name)
	case <-time.After(50 * time.Millisecond):
	}
	if w.Watching() != 0 {
		t.Errorf("watching %d after all were told or unwatched", w.Watching())
	}
}
