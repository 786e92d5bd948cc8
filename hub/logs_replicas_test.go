package hub

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/protocol"
)

const otherReplica = "https://hub-a.test:8443"

// note is a logs: notification's body from otherReplica for machine.
func note(t *testing.T, machine, workload string, i int) string {
	t.Helper()
	s, err := encodeLogNote(machine, protocol.LogRequest{Token: fmt.Sprintf("%032x", i), Workload: workload, Tail: 5, Follow: true, URL: otherReplica})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Another replica's log requests are held here for the machine's next
// sync answer, with that replica's URL, and then forgotten; this
// replica's own, coming back through the store, and repeats are not
// held twice; a garbled one is refused with one log line a minute.
func TestLogNotesAreHandedOutWithTheirURL(t *testing.T) {
	h, w := placed(t)
	var logs bytes.Buffer
	h.log = slog.New(slog.NewTextHandler(&logs, nil))
	h.cfg.URL = "https://hub-b.test:8443/"

	// One replica on SQLite: no URL, the upload goes to the hub polled.
	got := readLogs(h, w.ID, LogOptions{})
	if req := takeRequest(t, h); req.URL != "" {
		t.Errorf("a lone replica asked for an upload to %q", req.URL)
	}
	waitTimers(t, h.clk, 1)
	h.clk.Advance(DefaultLogConnectTimeout)
	<-got

	h.acceptLogNote(note(t, "m-1", w.ID, 1))
	h.acceptLogNote(note(t, "m-1", w.ID, 1)) // notified twice
	own, err := encodeLogNote("m-1", protocol.LogRequest{Token: fmt.Sprintf("%032x", 2), Workload: w.ID, URL: "https://hub-b.test:8443"})
	if err != nil {
		t.Fatal(err)
	}
	h.acceptLogNote(own)
	req := takeRequest(t, h)
	want := protocol.LogRequest{Token: fmt.Sprintf("%032x", 1), Workload: w.ID, Tail: 5, Follow: true, URL: otherReplica}
	if req != want {
		t.Errorf("handed %+v, want %+v", req, want)
	}
	h.Wake("m-1")
	if resp := h.sync("m-1", &protocol.SyncRequest{}); len(resp.Logs) != 0 {
		t.Errorf("handed again, or this replica's own handed as another's: %+v", resp.Logs)
	}
	if h.logs.pending("m-1") || len(h.logs.remote) != 0 {
		t.Errorf("still held: %d", len(h.logs.remote))
	}

	for _, bad := range []string{"garbled", strings.Replace(note(t, "m-1", w.ID, 3), otherReplica, "http://hub-a.test:8443", 1)} {
		h.acceptLogNote(bad)
	}
	if len(h.logs.remote) != 0 {
		t.Errorf("held a refused note: %+v", h.logs.remote)
	}
	if n := strings.Count(logs.String(), "refused another replica's log request"); n != 1 {
		t.Errorf("%d log lines for two refused notes in a minute, want 1:\n%s", n, logs.String())
	}
}

// Other replicas' log requests held here are bounded per machine and in
// all, like local ones, and expire after the connect timeout.
func TestRemoteLogWantsAreBoundedAndExpire(t *testing.T) {
	h, w := placed(t)
	for i := range MaxRemoteLogWantsPerMachine + 1 {
		h.acceptLogNote(note(t, "m-1", w.ID, i))
	}
	if n := h.logs.remotePerMachine["m-1"]; n != MaxRemoteLogWantsPerMachine || len(h.logs.remote) != n {
		t.Fatalf("held %d for m-1 (%d in all), want %d", n, len(h.logs.remote), MaxRemoteLogWantsPerMachine)
	}
	for i := MaxRemoteLogWantsPerMachine + 1; len(h.logs.remote) < MaxRemoteLogWants; i++ {
		if err := h.logs.addRemote(fmt.Sprintf("m-%d", i), protocol.LogRequest{Token: fmt.Sprintf("%032x", i), Workload: w.ID, URL: otherReplica}, h.clk); err != nil {
			t.Fatalf("under the bound: %v", err)
		}
	}
	err := h.logs.addRemote("m-x", protocol.LogRequest{Token: strings.Repeat("f", 32), Workload: w.ID, URL: otherReplica}, h.clk)
	if !errors.Is(err, ErrUnavailable) || len(h.logs.remote) != MaxRemoteLogWants {
		t.Errorf("over the bound in all: %v, %d held", err, len(h.logs.remote))
	}
	if got := h.logs.take("m-1"); len(got) != MaxRemoteLogWantsPerMachine || got[0].URL != otherReplica {
		t.Errorf("took %+v", got)
	}
	if !h.logs.pending("m-9") {
		t.Error("m-9's request is not pending")
	}
	h.clk.Advance(DefaultLogConnectTimeout - time.Millisecond)
	if !h.logs.pending("m-9") {
		t.Error("expired before the connect timeout")
	}
	h.clk.Advance(time.Millisecond)
	if h.logs.pending("m-9") || h.logs.take("m-9") != nil {
		t.Error("m-9's request outlived the connect timeout")
	}
	if len(h.logs.remote) != 0 || len(h.logs.remotePerMachine) != 0 {
		t.Errorf("left %d held, %v", len(h.logs.remote), h.logs.remotePerMachine)
	}
}
