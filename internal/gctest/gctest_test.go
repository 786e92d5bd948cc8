package gctest

import (
	"testing"
	"time"
)

var kept *[4096]byte

// A value nothing keeps is freed; one a global keeps is not.
func TestFreedTellsAValueKeptFromOneFreed(t *testing.T) {
	v, freed := Watched()
	v[0] = 1
	if !Freed(freed, 5*time.Second) {
		t.Error("a value nothing keeps was not freed")
	}
	kept, freed = Watched()
	if Freed(freed, 100*time.Millisecond) {
		t.Error("a value a global keeps was freed")
	}
	kept = nil
}
