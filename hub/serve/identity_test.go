package serve_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// A replaced machine's certificate is refused at the handshake, resumed
// or not, and so is a certificate of an enrolled machine that the hub has
// no record of issuing.
func TestReplacedOrUnknownCertificateRefusedAtHandshake(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: time.Second})
	dir, nw := e.enroll()
	b, _ := os.ReadFile(filepath.Join(dir, "machine-id"))
	id := strings.TrimSpace(string(b))
	tr := nw.Transport()
	raw := rawClient(e, *tr.Certificate())
	if _, status, err := rawSync(t, e, raw); err != nil || status != http.StatusOK {
		t.Fatalf("first raw sync: %d, %v", status, err)
	}

	certPEM, key := signed(t, e.ca, id)
	unknown := transportWith(t, e, certPEM, key)
	_, err := unknown.Sync(context.Background(), &protocol.SyncRequest{ProtocolVersion: protocol.Version})
	var refused *hubclient.TLSRefusedError
	if err != nil && !errors.As(err, &refused) {
		// Under load the hub's alert can be lost to the connection's
		// close (TLS 1.3 checks the client after its Finished); the
		// agent's next try, as on its backoff, reads the reason.
		_, err = unknown.Sync(context.Background(), &protocol.SyncRequest{ProtocolVersion: protocol.Version})
	}
	if !errors.As(err, &refused) {
		t.Errorf("a certificate the hub never recorded: got %v, want the handshake refused", err)
	}

	if err := e.hub.ReplaceMachine(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	resumed, _, err := rawSync(t, e, raw)
	if !resumed {
		t.Fatal("the session was not resumed: the test shows nothing")
	}
	if err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Fatalf("resumed session of a replaced certificate: got %v, want the handshake refused", err)
	}
}

// A restarted hub resumes the TLS sessions its agents had: its session
// ticket keys are the CA's, not its process's.
func TestRestartedHubResumesItsAgentsSessions(t *testing.T) {
	e := startEnv(t, envOptions{pollTimeout: 5 * time.Second})
	_, nw := e.enroll()
	tr := nw.Transport()
	if _, err := tr.Sync(context.Background(), &protocol.SyncRequest{ProtocolVersion: protocol.Version}); err != nil {
		t.Fatal(err)
	}
	raw := rawClient(e, *tr.Certificate())
	if _, status, err := rawSync(t, e, raw); err != nil || status != http.StatusOK {
		t.Fatalf("first raw sync: %d, %v", status, err)
	}
	e.restart(0)
	resumed, status, err := rawSync(t, e, raw)
	if err != nil || status != http.StatusOK {
		t.Fatalf("raw sync after the restart: %d, %v", status, err)
	}
	if !resumed {
		t.Error("the restarted hub did not resume the session")
	}
}
