//go:build race

package hub_test

// raceEnabled: the race detector slows every goroutine several times, so
// the backlog tests run a smaller backlog under it; .ci/run runs the
// full one without it.
const raceEnabled = true
