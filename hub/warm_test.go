package hub

import (
	"context"
	"testing"

	"einsora.dev/edge/protocol"
)

// A pass with nothing to admit reads ahead what the next admission would
// read first (the region, once settled; the machines changed since), at
// most once a ControllerInterval, so the first change after a quiet spell
// does not pay for the region (issue 13: a second at 10,000 machines).
func TestQuietPassReadsTheCapacityViewAhead(t *testing.T) {
	h := newTestHub(t)
	ctx := context.Background()
	for _, id := range []string{"m1", "m2", "m3"} {
		h.machine(id)
	}
	b := h.ctl.backend
	if !b.Behind() {
		t.Fatal("a view never read is not behind")
	}
	h.pass() // takes the lease; its first pass checks the view whole
	if err := h.ctl.passFor(ctx, false); err != nil {
		t.Fatal(err)
	}
	if b.Behind() {
		t.Fatal("after quiet passes the view is still behind: it did not read ahead")
	}

	// A machine's inventory changes: the view is behind again, and a
	// pass reads ahead only once a ControllerInterval has passed.
	inv := testInventory()
	inv.CPUs = 4
	h.sync("m2", &protocol.SyncRequest{Inventory: inv})
	if !b.Behind() {
		t.Fatal("a changed machine left the view up to date")
	}
	h.clk.Advance(h.ctl.cfg.ControllerInterval / 2)
	if err := h.ctl.passFor(ctx, false); err != nil {
		t.Fatal(err)
	}
	if !b.Behind() {
		t.Fatal("a pass within ControllerInterval of the last read ahead read again")
	}
	h.clk.Advance(h.ctl.cfg.ControllerInterval / 2)
	if err := h.ctl.passFor(ctx, false); err != nil {
		t.Fatal(err)
	}
	if b.Behind() {
		t.Fatal("a pass a ControllerInterval later did not read the changed machine ahead")
	}

	// What it read ahead is what admission uses: the new inventory.
	w := h.create("big", protocol.KindContainer)
	h.pass()
	if got := h.workload(w.ID); got.Machine == "" {
		t.Fatalf("not placed after reading ahead: %s (%s)", got.State, got.Reason)
	}
}
