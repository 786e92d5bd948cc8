// Package tcprelay is a TCP relay for tests: it forwards connections made
// to it to a target (a TCP address or a unix socket) and can be cut, so
// that what goes through it hangs as over a cut cable: no byte passes
// either way and no connection is closed, until it is healed. Bytes read
// while cut are held and delivered after the heal, as TCP would
// retransmit them; a connection made while cut is accepted (the kernel
// does that) but not dialled through until the heal.
package tcprelay

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// MaxConns bounds the connections a relay carries at once; past it a new
// one is closed at once. Tests need a few dozen.
const MaxConns = 1024

// bufSize is each direction's buffer: the most a cut relay holds per
// connection and direction.
const bufSize = 32 << 10

// Relay forwards the connections accepted on its listener to its target.
type Relay struct {
	ln              net.Listener
	network, target string

	// mu guards the following fields; healed is signalled on Heal and
	// Close.
	mu     sync.Mutex
	healed *sync.Cond
	cut    bool
	closed bool
	conns  map[net.Conn]struct{}
	held   int64 // bytes read while cut, not yet written
	wg     sync.WaitGroup
}

// Listen starts a relay on a free loopback port to target on network
// ("tcp" or "unix").
func Listen(network, target string) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("relay to %s: %w", target, err)
	}
	r := &Relay{ln: ln, network: network, target: target, conns: make(map[net.Conn]struct{})}
	r.healed = sync.NewCond(&r.mu)
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the relay's address, host:port.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Cut stops forwarding, both ways, on every connection, without closing
// any.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = true
}

// Heal forwards again, first what was held.
func (r *Relay) Heal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = false
	r.healed.Broadcast()
}

// Held is how many bytes the relay read while cut and has not passed on.
func (r *Relay) Held() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}

// Close stops the relay and closes every connection through it.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.healed.Broadcast()
	r.mu.Unlock()
	err := r.ln.Close()
	r.wg.Wait()
	return err
}

// track adds c to the open connections; false when the relay is closed
// or full, and c must be closed.
func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || len(r.conns) >= MaxConns {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) untrack(c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.conns, c)
}

// pass waits while the relay is cut, counting n bytes held meanwhile;
// false when it was closed.
func (r *Relay) pass(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut {
		r.held += int64(n)
		for r.cut && !r.closed {
			r.healed.Wait()
		}
		r.held -= int64(n)
	}
	return !r.closed
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		if !r.track(c) {
			c.Close()
			continue
		}
		r.wg.Add(1)
		go r.serve(c)
	}
}

func (r *Relay) serve(c net.Conn) {
	defer r.wg.Done()
	defer r.untrack(c)
	defer c.Close()
	if !r.pass(0) { // a cut cable lets no connection through either
		return
	}
	up, err := net.Dial(r.network, r.target)
	if err != nil {
		return
	}
	if !r.track(up) {
		up.Close()
		return
	}
	defer r.untrack(up)
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { r.copy(up, c); done <- struct{}{} }()
	go func() { r.copy(c, up); done <- struct{}{} }()
	// Either side closing ends both, as the far end of a connection sees
	// a close.
	<-done
	c.Close()
	up.Close()
	<-done
}

// copy forwards src to dst, holding what it read while the relay is cut.
func (r *Relay) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, bufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !r.pass(n) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: serve closes both
		}
	}
}
