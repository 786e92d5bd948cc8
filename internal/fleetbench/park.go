package fleetbench

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"time"

	"einsora.dev/edge/internal/parkconn"
)

// ParkEnv, set to 1 in the baseline's environment, makes it park its held
// polls (see parkPoll).
const ParkEnv = "FLEETBENCH_BASELINE_PARK"

const (
	// parkSweepEvery is how often the parked connections are checked for
	// a peer that has gone: the offline rule's 45 s, with room.
	parkSweepEvery = 15 * time.Second
	// parkWriteTimeout bounds writing a parked poll's answer.
	parkWriteTimeout = 10 * time.Second
)

// parkedPoll is a held poll whose connection the baseline took from
// net/http (HTTP/1.1's Hijack): no goroutine waits on it, so it costs the
// TLS connection's state and no stacks. A change, the end of its hold or
// the sweep ends it.
type parkedPoll struct {
	conn  *tls.Conn
	m     *baseMachine
	gen   int64 // the generation the agent has
	timer *time.Timer
}

// parkPoll takes a held poll's connection from net/http and parks it
// until a change or the end of the hold; its answer is then written by
// hand and the connection given back to net/http for its next request.
// It reports false where the connection cannot be taken (HTTP/2): the
// handler then holds the poll itself.
func (s *baseline) parkPoll(w http.ResponseWriter, r *http.Request, m *baseMachine, gen int64) bool {
	hj, ok := w.(http.Hijacker)
	if !ok || r.ProtoMajor != 1 {
		return false
	}
	// What is left of the body (the encoder's newline) would otherwise
	// be read as the start of the next request.
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return true
	}
	c, rw, err := hj.Hijack()
	if err != nil {
		return false
	}
	tc, ok := c.(*tls.Conn)
	if !ok || rw.Reader.Buffered() > 0 {
		// Not TLS, or a request pipelined behind the poll: no agent's.
		c.Close()
		return true
	}
	p := &parkedPoll{conn: tc, m: m, gen: gen}
	s.mu.Lock()
	if old := m.parked; old != nil {
		// The same machine on another connection: the old poll ends.
		go s.release(old)
	}
	m.parked = p
	s.parked[p] = struct{}{}
	p.timer = time.AfterFunc(s.hold, func() { s.release(p) })
	if m.gen != gen {
		// Changed while the connection was being taken.
		go s.release(p)
	}
	s.mu.Unlock()
	return true
}

// unparkLocked takes p off its machine and the parked set; false if it
// was no longer parked.
func (s *baseline) unparkLocked(p *parkedPoll) bool {
	if _, ok := s.parked[p]; !ok {
		return false
	}
	delete(s.parked, p)
	if p.m.parked == p {
		p.m.parked = nil
	}
	p.timer.Stop()
	return true
}

// release answers p, if it is still parked, and gives its connection back
// to net/http.
func (s *baseline) release(p *parkedPoll) {
	s.mu.Lock()
	if !s.unparkLocked(p) {
		s.mu.Unlock()
		return
	}
	resp, back := answer(p.m, p.gen), s.back
	s.mu.Unlock()
	body, err := json.Marshal(resp)
	if err != nil {
		p.conn.Close()
		return
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if err := parkconn.Respond(p.conn, http.StatusOK, h, append(body, '\n'), parkWriteTimeout); err != nil {
		p.conn.Close()
		return
	}
	if !back.Give(p.conn) {
		p.conn.Close()
	}
}

// serveParked serves the connections of answered parked polls on srv
// and sweeps the parked ones, until s.closed.
func (s *baseline) serveParked(srv *http.Server, addr net.Addr) {
	back := parkconn.NewListener(addr)
	s.mu.Lock()
	s.back = back
	s.mu.Unlock()
	go srv.Serve(back)
	go func() {
		t := time.NewTicker(parkSweepEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.sweep()
			case <-s.closed:
				return
			}
		}
	}()
}

// sweep closes the parked connections whose peer has closed, reset or
// stopped answering the kernel's keepalives, as net/http's read in the
// background would have noticed.
func (s *baseline) sweep() {
	s.mu.Lock()
	ps := slices.Collect(maps.Keys(s.parked))
	s.mu.Unlock()
	for _, p := range ps {
		if !parkconn.PeerGone(p.conn.NetConn()) {
			continue
		}
		s.mu.Lock()
		gone := s.unparkLocked(p)
		s.mu.Unlock()
		if gone {
			p.conn.Close()
		}
	}
}
