package hubclient

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"einsora.dev/edge/protocol"
)

// A sync that fails for the hub's side (a 503 from a replica cut off from
// its store, then a replica that refuses connections) moves the next sync
// to the next replica; a 4xx, the agent's own mistake, does not.
func TestFailoverMovesToTheNextReplica(t *testing.T) {
	hubCA := newTestCA(t)
	cert := hubCA.issue(t, "hub", x509.ExtKeyUsageServerAuth, "127.0.0.1")
	cut, _ := countingServer(t, cert, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Connection", "close")
		http.Error(w, `{"error":"store unreachable"}`, http.StatusServiceUnavailable)
	})
	healthy, healthyRequests := countingServer(t, cert, func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(protocol.SyncResponse{StoreID: "st-1", Generation: 7})
	})
	refusing := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return "https://" + addr
	}()
	tr := newTransport(t, hubCA, cut.URL, nil)
	f, err := NewFailover(tr, []string{refusing, healthy.URL, cut.URL})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.URLs(); len(got) != 3 || got[0] != cut.URL {
		t.Fatalf("replicas %v, want the one in use first, no duplicates", got)
	}
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version}
	ctx := context.Background()
	if _, err := f.Sync(ctx, req); err == nil {
		t.Fatal("the cut replica's 503 was not an error")
	}
	if tr.URL() != refusing {
		t.Fatalf("after a 503, dials %s, want the next replica %s", tr.URL(), refusing)
	}
	if _, err := f.Sync(ctx, req); err == nil {
		t.Fatal("a refused connection was not an error")
	}
	if tr.URL() != healthy.URL {
		t.Fatalf("after a refused connection, dials %s, want %s", tr.URL(), healthy.URL)
	}
	resp, err := f.Sync(ctx, req)
	if err != nil || resp.Generation != 7 || healthyRequests.Load() != 1 {
		t.Fatalf("on the healthy replica: %+v, %v", resp, err)
	}
	if tr.URL() != healthy.URL {
		t.Errorf("a sync that succeeded moved the transport to %s", tr.URL())
	}
}

func TestFailoverStaysOnTheAgentsOwnMistakes(t *testing.T) {
	hubCA := newTestCA(t)
	cert := hubCA.issue(t, "hub", x509.ExtKeyUsageServerAuth, "127.0.0.1")
	refusingAgent, _ := countingServer(t, cert, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"revoked"}`, http.StatusForbidden)
	})
	tr := newTransport(t, hubCA, refusingAgent.URL, nil)
	f, err := NewFailover(tr, []string{"https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Sync(context.Background(), &protocol.SyncRequest{ProtocolVersion: protocol.Version}); err == nil {
		t.Fatal("a 403 was not an error")
	}
	if tr.URL() != refusingAgent.URL {
		t.Errorf("a 403 moved the agent to %s", tr.URL())
	}
	if _, err := NewFailover(tr, []string{"http://not-https"}); err == nil {
		t.Error("a URL that is not https was taken")
	}
}

// Replicas learned from the hub come after the given ones, and a failure
// of the one in use reaches them.
func TestFailoverReachesLearnedReplicas(t *testing.T) {
	hubCA := newTestCA(t)
	cert := hubCA.issue(t, "hub", x509.ExtKeyUsageServerAuth, "127.0.0.1")
	cut, _ := countingServer(t, cert, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"store unreachable"}`, http.StatusServiceUnavailable)
	})
	learned, _ := countingServer(t, cert, func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(protocol.SyncResponse{StoreID: "st-1", Generation: 7})
	})
	tr := newTransport(t, hubCA, cut.URL, nil)
	f, err := NewFailover(tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.SetLearned([]string{"http://plain.example:80", cut.URL, learned.URL})
	if got := f.URLs(); len(got) != 2 || got[0] != cut.URL || got[1] != learned.URL {
		t.Fatalf("replicas %v, want the given one, then the learned one, no repeats, no plain HTTP", got)
	}
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version}
	if _, err := f.Sync(context.Background(), req); err == nil {
		t.Fatal("the cut replica's 503 was not an error")
	}
	if resp, err := f.Sync(context.Background(), req); err != nil || resp.Generation != 7 {
		t.Fatalf("on the learned replica: %+v, %v", resp, err)
	}
	f.SetLearned(nil)
	if got := f.URLs(); len(got) != 1 || got[0] != cut.URL {
		t.Errorf("after the hub sent none: %v, want the given one alone", got)
	}
}

// An agent with other replicas to move to pings its hub often enough to
// leave one that stopped answering (a paused process, whose kernel still
// answers) in about 30 s; alone, it pings only after a whole poll hold.
func TestAgentWithReplicasPingsItsHubOften(t *testing.T) {
	hubCA := newTestCA(t)
	pingOf := func(tr *HTTPS) time.Duration {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.cur.tr.HTTP2.SendPingTimeout
	}
	tr := newTransport(t, hubCA, "https://hub-1.example.com:8443", nil)
	f, err := NewFailover(tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := pingOf(tr); got != PingAfter {
		t.Errorf("alone: ping after %s, want %s", got, PingAfter)
	}
	f.SetLearned([]string{"https://hub-2.example.com:8443"})
	if got := pingOf(tr); got != ReplicaPingAfter {
		t.Errorf("with a replica learned: ping after %s, want %s", got, ReplicaPingAfter)
	}
	given := newTransport(t, hubCA, "https://hub-1.example.com:8443", nil)
	if _, err := NewFailover(given, []string{"https://hub-2.example.com:8443"}); err != nil {
		t.Fatal(err)
	}
	if got := pingOf(given); got != ReplicaPingAfter {
		t.Errorf("with a replica given: ping after %s, want %s", got, ReplicaPingAfter)
	}
}
