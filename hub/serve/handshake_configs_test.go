package serve

import (
	"crypto/tls"
	"testing"
)

// A config is lent to one handshake at a time, comes back when its
// VerifyConnection runs, and is not lent after its ticket key span.
func TestHandshakeConfigLentOneHandshakeAtATimeWithinItsSpan(t *testing.T) {
	var made []*handshakeConfig
	h := &handshakeConfigs{max: 4, clone: func(hc *handshakeConfig) *tls.Config {
		made = append(made, hc)
		return &tls.Config{}
	}}
	a, b, c := &countedConn{}, &countedConn{}, &countedConn{}
	first := h.lend(a, 1)
	if second := h.lend(b, 1); second == first {
		t.Fatal("a config was lent to a second handshake while the first had it")
	}
	if got := h.giveBack(made[0]); got != a {
		t.Fatalf("the first config verified %p, want its own handshake's conn %p", got, a)
	}
	if again := h.lend(c, 1); again != first {
		t.Fatalf("a config given back was not lent again: %d made", len(made))
	}
	if got := h.giveBack(made[0]); got != c {
		t.Fatalf("the config lent again verified %p, want %p", got, c)
	}
	if next := h.lend(a, 2); next == first {
		t.Fatal("a config of the last ticket key span was lent in the next")
	}
}
