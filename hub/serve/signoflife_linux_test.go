package serve_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"einsora.dev/edge/protocol"
)

// Rule 8 on a long hold, over real TCP: a poll held for minutes with no
// byte sent either way keeps its machine online, by the hub's kernel
// keepalive alone (the answers it reads from TCP_INFO); once the host
// vanishes (its packets dropped, no FIN, no RST), the machine goes offline
// within the offline rule while the poll still waits.
func TestRule8_KeepaliveIsAHeldPollsSignOfLife(t *testing.T) {
	const offlineAfter = 3 * time.Second
	// The listener's keepalives are sized to the rule (serve.ListenFor).
	e := startEnv(t, envOptions{pollTimeout: 10 * time.Minute, offlineAfter: offlineAfter})
	_, nw := e.enroll()
	ctx := context.Background()
	ms, err := e.hub.Machines(ctx)
	if err != nil || len(ms) != 1 {
		t.Fatalf("machines %v, %v; want the one enrolled", ms, err)
	}
	id := ms[0].ID
	inv := testInventory()
	resp, err := nw.Transport().Sync(ctx, &protocol.SyncRequest{ProtocolVersion: protocol.Version, AgentVersion: "v1", Inventory: &inv})
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan error, 1)
	go func() {
		_, err := nw.Transport().Sync(ctx, &protocol.SyncRequest{ProtocolVersion: protocol.Version, AgentVersion: "v1", StoreID: resp.StoreID, Generation: resp.Generation})
		polled <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); e.hub.WaitingPolls() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the poll was not held")
		}
	}
	online := func() bool {
		t.Helper()
		v, err := e.hub.Machine(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return v.Online
	}
	// Three offline periods with no byte on the connection.
	for end := time.Now().Add(3 * offlineAfter); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if !online() {
			t.Fatal("a machine whose held poll's connection answers the keepalive went offline")
		}
	}
	if e.hub.WaitingPolls() != 1 {
		t.Fatal("the poll ended; the test needs it held")
	}

	if os.Geteuid() != 0 {
		t.Skip("not root: cannot drop the host's packets to show it going offline")
	}
	_, port, _ := net.SplitHostPort(e.addr)
	rule := []string{"INPUT", "-i", "lo", "-p", "tcp", "--dport", port, "-j", "DROP"}
	if out, err := exec.Command("iptables", append([]string{"-I"}, rule...)...).CombinedOutput(); err != nil {
		t.Skipf("cannot drop the host's packets with iptables (%v: %s)", err, out)
	}
	t.Cleanup(func() { exec.Command("iptables", append([]string{"-D"}, rule...)...).Run() })
	cut := time.Now()
	for online() {
		if time.Since(cut) > offlineAfter+2*time.Second {
			t.Fatalf("still online %s after the host vanished", time.Since(cut).Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("offline %s after the host vanished", time.Since(cut).Round(time.Millisecond))
}
