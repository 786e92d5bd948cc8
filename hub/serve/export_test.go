package serve

// BusyNow is busyNow, for the tests of package serve_test.
func (s *Server) BusyNow() bool { return s.busyNow() }
