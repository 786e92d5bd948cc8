package testnet

import "testing"

// The drops are the second column of every CPU's row, in hexadecimal.
func TestBacklogDropsSumsEveryCPUsSecondColumn(t *testing.T) {
	stat := "0000bead 00002b61 00000000\n00008bf9 00002bb7 00000000\n"
	if got, want := sumBacklogDrops(stat), int64(0x2b61+0x2bb7); got != want {
		t.Errorf("got %d, want %d", got, want)
	}
	if got := sumBacklogDrops("0000bead\n"); got != -1 {
		t.Errorf("a row without drops: got %d, want -1", got)
	}
	if got := BacklogDrops(); got < -1 {
		t.Errorf("this host: %d", got)
	}
}
