package serve_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"einsora.dev/edge/hub/serve"
	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// The attacks run from other loopback addresses than the agents' own
// 127.0.0.1, so per-source bounds tell them apart; all of it goes to
// 127.0.0.1.
func attackerDialer(t *testing.T, i int) *net.Dialer {
	t.Helper()
	ip := net.IPv4(127, 0, 0, byte(2+i%200))
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
	ln, err := net.Listen("tcp", ip.String()+":0")
	if err != nil {
		t.Skipf("this system cannot use %s as a source address: %v", ip, err)
	}
	ln.Close()
	return d
}

// legit runs a machine's syncs back to back (each answered at once) until
// stop is closed, at most n of them, and records each one's latency.
type legit struct {
	mu        sync.Mutex
	latencies []time.Duration
	errs      []error
}

func (l *legit) run(tr *hubclient.HTTPS, n int, stop <-chan struct{}) {
	req := &protocol.SyncRequest{ProtocolVersion: protocol.Version}
	for range n {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		_, err := tr.Sync(ctx, req)
		cancel()
		l.mu.Lock()
		if err != nil {
			l.errs = append(l.errs, err)
		} else {
			l.latencies = append(l.latencies, time.Since(start))
		}
		l.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// check says whether every sync succeeded with p99 under a second.
func (l *legit) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 0 {
		t.Errorf("%d of %d legitimate syncs failed; first: %v", len(l.errs), len(l.errs)+len(l.latencies), l.errs[0])
	}
	if len(l.latencies) < 10 {
		t.Fatalf("only %d legitimate syncs succeeded", len(l.latencies))
	}
	lat := slices.Clone(l.latencies)
	slices.Sort(lat)
	if p99 := lat[len(lat)*99/100]; p99 >= time.Second {
		t.Errorf("legitimate syncs' p99 %s, want under 1 s", p99)
	}
}

// slowEnrol opens a connection without a certificate and posts an
// enrolment whose 16 KiB body trickles in a byte at a time. It returns the
// status the hub answered (0 if it cut the connection) once the hub ends
// the request or 20 s pass.
func slowEnrol(e *env, d *net.Dialer, gap time.Duration) (int, error) {
	raw, err := d.Dial("tcp", e.addr)
	if err != nil {
		return 0, err
	}
	// X25519 alone: the cheapest handshake, so that the test measures
	// the budgets, not the CPU (under -race above all).
	c := tls.Client(raw, &tls.Config{
		RootCAs: e.ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"},
		CurvePreferences: []tls.CurveID{tls.X25519},
	})
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", protocol.EnrollPath, 16<<10); err != nil {
		return 0, err
	}
	status := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			status <- -1 // the attacker gave up, not the hub
			return
		}
		if err != nil {
			status <- 0
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	for range 16 << 10 {
		select {
		case s := <-status:
			return s, nil
		case <-time.After(gap):
		}
		if _, err := c.Write([]byte{' '}); err != nil {
			return <-status, nil
		}
	}
	return <-status, nil
}

// Slow enrolment bodies fill the unauthenticated budget, and only it:
// enrolled machines' syncs keep succeeding while they trickle, and the
// trickling requests are cut at their body deadline.
func TestSlowEnrolmentBodiesDoNotStarveMachines(t *testing.T) {
	lim := slowBodyLimits()
	e := startEnv(t, envOptions{pollTimeout: 5 * time.Second, limits: lim})
	var trs []*hubclient.HTTPS
	for range 3 {
		_, nw := e.enroll()
		trs = append(trs, nw.Transport())
	}
	// Each attacker comes back as soon as it is shed or cut, until the
	// legitimate syncs are done.
	const attackers = 12 // three times the budget
	stopAttack := make(chan struct{})
	var shed, cut, answered atomic.Int64
	var attack sync.WaitGroup
	for i := range attackers {
		d := attackerDialer(t, i%4)
		attack.Go(func() {
			for range 100 {
				select {
				case <-stopAttack:
					return
				default:
				}
				status, err := slowEnrol(e, d, 300*time.Millisecond)
				switch {
				case err != nil, status < 0:
				case status == http.StatusServiceUnavailable:
					shed.Add(1)
					// Back soon, but not in a tight loop of
					// handshakes that would only measure the CPU.
					time.Sleep(time.Second)
				case status == 0:
					cut.Add(1)
				default:
					answered.Add(1)
				}
			}
		})
	}
	waitFor(t, 10*time.Second, "the attack to fill the unauthenticated budget", func() bool {
		return e.srv.Stats().Anonymous >= int64(lim.MaxAnonActive)
	})
	var l legit
	stop := make(chan struct{})
	var syncs sync.WaitGroup
	for _, tr := range trs {
		syncs.Go(func() { l.run(tr, 20, stop) })
	}
	syncs.Wait()
	close(stop)
	close(stopAttack)
	attack.Wait()
	l.check(t)
	if shed.Load() == 0 {
		t.Error("no enrolment was shed with 503: the attack never filled its budget")
	}
	if cut.Load()+answered.Load() == 0 {
		t.Error("no trickling enrolment was cut at its body deadline")
	}
	t.Logf("attack: %d shed with 503, %d cut or answered at the body deadline", shed.Load(), cut.Load()+answered.Load())
}

func slowBodyLimits() serve.Limits {
	return serve.Limits{
		MaxActive: 4, MaxAnonActive: 4, Rate: 1000, Burst: 1000, EnrollRate: 1000, EnrollBurst: 1000,
		BodyTimeoutMin: 500 * time.Millisecond, BodyRate: 16 << 10, BodyTimeoutMax: 2 * time.Second,
	}
}

// clientHello returns the bytes of a TLS 1.3 ClientHello for the hub.
func clientHello(t *testing.T, e *env) []byte {
	t.Helper()
	rc := &recordConn{}
	tls.Client(rc, &tls.Config{RootCAs: e.ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}).Handshake()
	if len(rc.written) == 0 {
		t.Fatal("no ClientHello written")
	}
	return rc.written
}

// recordConn keeps what is written to it and fails every read.
type recordConn struct {
	net.Conn
	written []byte
}

func (r *recordConn) Write(b []byte) (int, error) {
	r.written = append(r.written, b...)
	return len(b), nil
}
func (r *recordConn) Read([]byte) (int, error) { return 0, errors.New("recording only") }
func (r *recordConn) Close() error             { return nil }

// silent opens a connection from d that sends hello (or nothing) and then
// waits for the hub to close it, at most 5 s (half the server's header
// timeout, over twice the handshake deadline); it says whether the
// hub closed it.
func silent(e *env, d *net.Dialer, hello []byte, opened chan<- struct{}) (closedByHub bool, err error) {
	c, err := d.Dial("tcp", e.addr)
	if err != nil {
		return false, err
	}
	defer c.Close()
	if _, err := c.Write(hello); err != nil {
		return false, err
	}
	opened <- struct{}{}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, nil
	}
	return true, nil
}

// Connections that send a ClientHello and then nothing, or nothing at all,
// hold their slots only until the handshake deadline, and only their
// source's share of them: agents' handshakes keep succeeding meanwhile.
func TestSilentHandshakesDoNotLockOutAgents(t *testing.T) {
	lim := serve.Limits{
		MaxHandshakes: 4, MaxUntrustedPerSource: 6, MaxUntrusted: 64,
		Rate: 1000, Burst: 1000, // the default 2 s handshake deadline
	}
	e := startEnv(t, envOptions{pollTimeout: 5 * time.Second, limits: lim})
	var trs []*hubclient.HTTPS
	for range 2 {
		_, nw := e.enroll()
		trs = append(trs, nw.Transport())
	}
	hello := clientHello(t, e)
	const attackers = 40 // from two sources, half saying hello
	var closed, kept atomic.Int64
	opened := make(chan struct{}, attackers)
	var attack sync.WaitGroup
	for i := range attackers {
		d := attackerDialer(t, i%2)
		var h []byte
		if i%4 < 2 {
			h = hello
		}
		attack.Go(func() {
			byHub, err := silent(e, d, h, opened)
			switch {
			case err != nil:
				opened <- struct{}{}
			case byHub:
				closed.Add(1)
			default:
				kept.Add(1)
			}
		})
	}
	for range attackers {
		<-opened
	}
	// Agents dial afresh for every sync, so each needs a handshake while
	// the silent connections come and go.
	var l legit
	stop := make(chan struct{})
	var syncs sync.WaitGroup
	for _, tr := range trs {
		syncs.Go(func() {
			for range 40 {
				tr.Close()
				l.run(tr, 1, stop)
			}
		})
	}
	syncs.Wait()
	attack.Wait()
	l.check(t)
	if kept.Load() > 0 {
		t.Errorf("%d silent connections were kept open past the handshake deadline", kept.Load())
	}
	st := e.srv.Stats()
	if st.Refused == 0 {
		t.Error("no connection was refused at accept although two sources opened 20 each with a share of 6")
	}
	waitFor(t, 5*time.Second, "every slot to be given back", func() bool {
		st := e.srv.Stats()
		return st.Handshakes == 0 && st.Untrusted == 0 && st.Sources == 0
	})
	t.Logf("attack: %d connections closed by the hub, %d refused at accept", closed.Load(), st.Refused)
}

// An anonymous connection is cut soon after its request, when it goes
// idle, rather than holding its source's share until the idle timeout
// (90 s): over HTTP/1.1 and HTTP/2.
func TestIdleAnonymousConnectionIsCut(t *testing.T) {
	e := startEnv(t, envOptions{})
	c, err := tls.Dial("tcp", e.addr, &tls.Config{RootCAs: e.ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: hub\r\nContent-Length: 0\r\n\r\n", protocol.EnrollPath)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("HTTP/1.1: the idle anonymous connection was kept open")
	}

	var onlyH2 http.Protocols
	onlyH2.SetHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool(), ServerName: "127.0.0.1"}, Protocols: &onlyH2,
	}}
	defer h2.CloseIdleConnections()
	resp, err = h2.Post(e.url+protocol.EnrollPath, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("got HTTP/%d, want HTTP/2", resp.ProtoMajor)
	}
	waitFor(t, 10*time.Second, "the idle HTTP/2 anonymous connection to be cut", func() bool { return e.srv.Stats().Untrusted == 0 })
}

// An anonymous connection that finished its handshake and then says
// nothing, over HTTP/2 (which would otherwise keep it for its 90 s idle
// timeout), is cut at the end of an anonymous connection's life: the
// header timeout plus the longest body deadline.
func TestSilentAnonymousConnectionIsCut(t *testing.T) {
	e := startEnv(t, envOptions{limits: serve.Limits{ReadHeaderTimeout: time.Second, BodyTimeoutMax: time.Second}})
	c, err := tls.Dial("tcp", e.addr, &tls.Config{RootCAs: e.ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("negotiated %q, want h2", c.ConnectionState().NegotiatedProtocol)
	}
	// The client preface and an empty SETTINGS frame, then nothing.
	c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("a silent anonymous HTTP/2 connection was kept open")
	}
	waitFor(t, 5*time.Second, "its source's share to be given back", func() bool { return e.srv.Stats().Untrusted == 0 })
}
