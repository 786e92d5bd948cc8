package serve

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"einsora.dev/edge/hub/httpapi"
	"einsora.dev/edge/hub/metrics"
	"einsora.dev/edge/internal/parkconn"
)

// Held polls over HTTP/1.1 are parked: the hub holds them with no
// goroutine (hub.Parking), and their connection is taken off net/http
// until the answer, written here by hand; then it goes back to the same
// http.Server (parkconn.Listener) for the agent's next request. A held
// poll then costs its TLS connection's state and no stack, where net/http
// keeps two or three goroutines on it (docs/performance.md, "Held polls
// parked off net/http").
const (
	// parkSweepEvery is how often the parked connections are checked for
	// a peer that has gone: the offline rule's 45 s, with room.
	parkSweepEvery = 15 * time.Second
	// parkWriteTimeout bounds writing a parked poll's answer.
	parkWriteTimeout = 10 * time.Second
	// parkBodyTail is how much of a parked sync's body may be left after
	// its JSON (the encoder's newline); a longer tail is no agent's.
	parkBodyTail = 512
)

// parkedSync is a sync whose poll the hub parked: httpapi.Parker.
type parkedSync struct {
	s *Server
	// mu guards the following fields.
	mu sync.Mutex
	// cancel is the hub's (hub.Parking.Parked); nil until parked.
	cancel func()
	// conn is the poll's connection, once taken; nil before.
	conn net.Conn
	// pending is an answer that came before conn was taken.
	pending func(http.ResponseWriter)
	// unwatch ends the watch of conn's peer (parkconn.Watcher).
	unwatch func()
	done    bool
}

func (p *parkedSync) Parked(cancel func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cancel = cancel
}

func (p *parkedSync) isParked() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cancel != nil
}

// Answer writes p's answer on its connection, once: from the hub's
// Deliver, a drain or the sweep, whichever comes first.
func (p *parkedSync) Answer(write func(http.ResponseWriter)) {
	if c, ok := p.end(write); ok {
		p.s.writeParked(c, write)
	}
}

// drop ends p unanswered, closing its connection: its peer has gone.
func (p *parkedSync) drop() {
	if c, ok := p.end(nil); ok && c != nil {
		c.Close()
	}
}

// end ends p, the first time it is called, and returns its connection:
// it stops the watch of its peer, takes it off the parked set and ends
// the hub's poll, if the end was not the hub's. An answer (write) that
// comes before the connection was taken is kept for take instead, and
// end reports false.
func (p *parkedSync) end(write func(http.ResponseWriter)) (net.Conn, bool) {
	p.mu.Lock()
	if p.done || (p.conn == nil && write != nil) {
		if !p.done {
			p.pending = write
		}
		p.mu.Unlock()
		return nil, false
	}
	p.done = true
	c, cancel, unwatch := p.conn, p.cancel, p.unwatch
	p.mu.Unlock()
	if unwatch != nil {
		// Before an answer: the agent's next request is net/http's.
		unwatch()
	}
	p.s.unpark(p)
	cancel()
	return c, true
}

// watch has the server's Watcher drop p as soon as its peer has gone,
// where there is one (Linux); elsewhere the sweep does, within
// parkSweepEvery.
func (p *parkedSync) watch(w *parkconn.Watcher) {
	if w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	// drop runs on the Watcher's goroutine, once this returns.
	if unwatch, err := w.Watch(rawConn(p.conn), p.drop); err == nil {
		p.unwatch = unwatch
	}
}

// parker offers the hub to park r's poll, where r's connection can be
// taken off net/http (HTTP/1.1); nil otherwise.
func (s *Server) parker(r *http.Request) *parkedSync {
	if r.ProtoMajor != 1 || r.TLS == nil {
		return nil
	}
	return &parkedSync{s: s}
}

func withParker(r *http.Request, p *parkedSync) *http.Request {
	if p == nil {
		return r
	}
	return r.WithContext(httpapi.WithParker(r.Context(), p))
}

// take takes a parked poll's connection off net/http, before its handler
// returns, and parks it until the hub answers.
func (s *Server) take(w http.ResponseWriter, r *http.Request, p *parkedSync) {
	// What is left of the body would be read as the next request.
	n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, parkBodyTail+1))
	c, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.log.Warn("a held poll could not be parked; its agent polls again", "err", err)
		p.drop()
		return
	}
	if n > parkBodyTail || rw.Reader.Buffered() > 0 {
		// A request behind the poll, or a body longer than it said:
		// no agent's.
		c.Close()
		p.drop()
		return
	}
	// net/http's deadlines were the request's.
	c.SetDeadline(time.Time{})
	s.mu.Lock()
	draining, watcher := s.draining, s.watcher
	s.parked[p] = struct{}{}
	s.mu.Unlock()
	p.mu.Lock()
	p.conn = c
	write := p.pending
	p.pending = nil
	p.mu.Unlock()
	if write != nil {
		p.Answer(write)
		return
	}
	p.watch(watcher)
	if draining {
		p.Answer(s.writeReconnect)
	}
}

func (s *Server) unpark(p *parkedSync) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.parked, p)
}

// parkedNow are the polls parked now.
func (s *Server) parkedNow() []*parkedSync {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.parked))
}

// writeParked writes an answer, as write writes it, on a parked poll's
// connection c, then gives c back to net/http for its next request, or
// closes it: after an error's answer (as net/http closes after a 503's
// Connection: close) or while draining.
func (s *Server) writeParked(c net.Conn, write func(http.ResponseWriter)) {
	rec := &parkedResponse{header: http.Header{}}
	write(rec)
	code := max(rec.code, http.StatusOK)
	s.metrics.SyncResult(metrics.ResultOf(code))
	s.mu.Lock()
	back, closing := s.back, s.draining || s.back == nil
	s.mu.Unlock()
	closing = closing || code != http.StatusOK || rec.header.Get("Connection") == "close"
	if closing {
		rec.header.Set("Connection", "close")
	}
	if err := parkconn.Respond(c, code, rec.header, rec.body.Bytes(), parkWriteTimeout); err != nil || closing {
		c.Close()
		return
	}
	if !back.Give(c) {
		c.Close()
	}
}

// parkedResponse keeps what an answer's writer wrote, for writeParked.
type parkedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *parkedResponse) Header() http.Header { return r.header }

func (r *parkedResponse) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *parkedResponse) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// serveParked serves the connections of answered parked polls and sweeps
// the parked ones, until the server stops.
func (s *Server) serveParked(addr net.Addr) {
	back := parkconn.NewListener(addr)
	w, err := parkconn.NewWatcher()
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		s.log.Warn("cannot watch parked polls' connections; an agent that leaves is noticed by the sweep, within 15 s", "err", err)
	}
	s.mu.Lock()
	s.back, s.watcher = back, w
	s.mu.Unlock()
	go s.srv.Serve(back)
	go func() {
		t := s.clk.NewTimer(parkSweepEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C():
				s.sweep()
				t.Reset(parkSweepEvery)
			case <-s.stopped:
				return
			}
		}
	}()
}

// sweep drops the parked polls whose peer has closed, reset or stopped
// answering the kernel's keepalives, or sent anything (a waiting HTTP/1.1
// client sends nothing but its close_notify before its FIN): what
// net/http's read in the background does for a held HTTP/1.1 request.
// Where the Watcher tells of these at once (Linux), the sweep is its
// backstop.
func (s *Server) sweep() {
	for _, p := range s.parkedNow() {
		p.mu.Lock()
		c := p.conn
		p.mu.Unlock()
		if c != nil && parkconn.PeerGone(rawConn(c)) {
			p.drop()
		}
	}
}

// rawConn is c's TCP connection, under its TLS and the hub's accounting.
func rawConn(c net.Conn) net.Conn {
	if cc := countedOf(c); cc != nil {
		return cc.Conn
	}
	return c
}
