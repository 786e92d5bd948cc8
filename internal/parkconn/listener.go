// Package parkconn keeps the connections of long polls parked off
// net/http: a poll whose connection was taken (http.Hijacker) waits with
// no goroutine on it, and once answered its connection goes back to the
// same http.Server through a Listener, which serves its next request.
package parkconn

import (
	"net"
	"sync"
)

// Listener hands an http.Server the connections given back to it (Give).
// Serve it with the server's Serve; the server's Close or Shutdown closes
// it.
type Listener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewListener returns a Listener whose Addr is addr, the listener the
// connections first came from.
func NewListener(addr net.Addr) *Listener {
	return &Listener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// Give hands c back to the server, waiting until it takes it. It reports
// false when the listener is closed: the caller closes c.
func (l *Listener) Give(c net.Conn) bool {
	select {
	case <-l.done:
		return false
	default:
	}
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and Give. The connections parked stay their
// owner's to close.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *Listener) Addr() net.Addr { return l.addr }
