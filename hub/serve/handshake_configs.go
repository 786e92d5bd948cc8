package serve

import (
	"crypto/tls"
	"sync"
	"sync/atomic"
)

// handshakeConfigs lends handshakes their tls.Config. A handshake's config
// must know its conn: its VerifyConnection ends the conn's handshake slot
// and marks the conn. A clone a handshake kept that conn in its closure,
// and tls.Conn keeps its config for its life: about 500 B a connection
// (docs/performance.md, "What a parked connection keeps"). A lent
// config comes back once its VerifyConnection ran, so one config serves
// many connections, one handshake at a time; those that kept it after
// their handshake read only what all the configs share. A handshake that
// fails before its VerifyConnection keeps its config, which goes with its
// conn. As many configs are made as handshakes wait on their peers at
// once: in a fleet's cold connect, half as many as connections; after
// it, hardly any. Each is made for one span of session ticket keys, and
// not lent after it.
type handshakeConfigs struct {
	// clone clones the base configuration, verifying through hc.
	clone func(hc *handshakeConfig) *tls.Config
	// max bounds free: no more handshakes are in flight at once.
	max int

	mu   sync.Mutex
	free []*handshakeConfig
	// made counts the configs made, for tests.
	made atomic.Int64
}

// handshakeConfig is a config lent to one handshake at a time.
type handshakeConfig struct {
	cfg  *tls.Config
	span int64
	// conn is the conn whose handshake has the config now: set and read
	// by that handshake's goroutine only, between lend and giveBack.
	conn *countedConn
}

// lend returns a config for c's handshake, made for the ticket key span.
func (h *handshakeConfigs) lend(c *countedConn, span int64) *tls.Config {
	h.mu.Lock()
	var hc *handshakeConfig
	for len(h.free) > 0 && hc == nil {
		hc = h.free[len(h.free)-1]
		h.free = h.free[:len(h.free)-1]
		if hc.span != span {
			hc = nil // its ticket keys are another span's
		}
	}
	h.mu.Unlock()
	if hc == nil {
		hc = &handshakeConfig{span: span}
		hc.cfg = h.clone(hc)
		h.made.Add(1)
	}
	hc.conn = c
	return hc.cfg
}

// giveBack ends hc's loan, from its VerifyConnection, and returns the
// conn whose handshake it was.
func (h *handshakeConfigs) giveBack(hc *handshakeConfig) *countedConn {
	c := hc.conn
	hc.conn = nil
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.free) < h.max {
		h.free = append(h.free, hc)
	}
	return c
}
