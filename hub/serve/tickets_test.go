package serve

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/ca"
)

// A session ticket is resumed while its key is the day's or the day
// before's, and not after: a running server changes its keys each day.
func TestSessionTicketKeysLastTwoDays(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 2, 23, 0, 0, 0, time.UTC))
	authority, err := ca.Open(ca.Options{Dir: t.TempDir(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := authority.ServerCertificate([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	// One running server's keys, refreshed at each handshake as
	// configForClient does (a restarted one: TestRestartedHubResumesItsAgentsSessions).
	base := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, Time: clk.Now}
	keys := &ticketKeys{ca: authority}
	server := func() *tls.Config {
		if err := keys.refresh(base, clk.Now()); err != nil {
			t.Fatal(err)
		}
		return base.Clone()
	}
	client := &tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: authority.Pool(), ServerName: "127.0.0.1",
		ClientSessionCache: tls.NewLRUClientSessionCache(1), Time: clk.Now,
	}
	handshake := func() bool {
		t.Helper()
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		srv := tls.Server(a, server())
		errc := make(chan error, 1)
		go func() {
			err := srv.Handshake()
			if err == nil {
				// The ticket comes after the handshake; a byte behind it
				// lets the client read it.
				_, err = srv.Write([]byte{1})
			}
			errc <- err
		}()
		c := tls.Client(b, client)
		var one [1]byte
		if _, err := c.Read(one[:]); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		return c.ConnectionState().DidResume
	}
	handshake()
	// Across midnight: the ticket was made with the day before's key.
	clk.Advance(2 * time.Hour)
	if !handshake() {
		t.Fatal("a ticket of the day before was not resumed")
	}
	// That handshake gave a ticket of today's key; two days on it is gone.
	clk.Advance(2 * ticketKeyLife)
	if handshake() {
		t.Fatal("a ticket two key spans old was resumed")
	}
}
