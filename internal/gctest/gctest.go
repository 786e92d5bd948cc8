// Package gctest tells tests whether the collector frees a value: the proof
// that nothing keeps it.
package gctest

import (
	"runtime"
	"time"
)

// Watched returns a value and a channel closed once the collector has
// freed it.
func Watched() (*[4096]byte, <-chan struct{}) {
	v := new([4096]byte)
	freed := make(chan struct{})
	runtime.AddCleanup(v, func(c chan struct{}) { close(c) }, freed)
	return v, freed
}

// Freed collects until freed is closed, for up to within, and reports
// whether it was.
func Freed(freed <-chan struct{}, within time.Duration) bool {
	for deadline := time.Now().Add(within); ; {
		runtime.GC()
		select {
		case <-freed:
			return true
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
