package serve

import (
	"context"
	"path/filepath"
	"testing"

	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/store/sqlite"
)

// MinOfflineAfter is the shortest --offline-after Run takes.
const MinOfflineAfter = minOfflineAfter

// BusyNow is busyNow, for the tests of package serve_test.
func (s *Server) BusyNow() bool { return s.busyNow() }

// NewCAAndStore is a directory, a CA in it and a store on a SQLite file
// there, for the tests and benchmarks of both packages.
func NewCAAndStore(tb testing.TB) (string, *ca.CA, *sqlite.Store) {
	tb.Helper()
	dir := tb.TempDir()
	authority, err := ca.Open(ca.Options{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "hub.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return dir, authority, st
}

// Sweep is sweep: the parked polls whose peer has gone are dropped now.
func (s *Server) Sweep() { s.sweep() }

// StopWatching stops the Watcher of parked polls' peers: the sweep is left.
func (s *Server) StopWatching() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watcher != nil {
		s.watcher.Close()
		s.watcher = nil
	}
}

// Parked is how many polls are parked now.
func (s *Server) Parked() int { return len(s.parkedNow()) }

// HandshakeConfigsMade is how many TLS configs the server's handshakes
// have been lent in all.
func (s *Server) HandshakeConfigsMade() int64 { return s.configs.made.Load() }
