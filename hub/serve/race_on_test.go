//go:build race

package serve_test

// raceEnabled: the race detector slows every goroutine several times, so
// the load tests run smaller fleets under it.
const raceEnabled = true
