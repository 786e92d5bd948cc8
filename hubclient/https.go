package hubclient

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/protocol"
)

// ErrReconnect is returned by Sync when the hub directed a reconnect (it is
// draining, or points the agent to another hub). The transport has already
// switched to the new URL, if any; the caller redials at once, without
// backoff, since the hub was just reachable.
var ErrReconnect = errors.New("the hub directed a reconnect")

// Keepalives. The sign of life of an agent's held poll is the hub's: its
// kernel probes the connection every 25 s and reads the answers (hub/serve),
// so the agent sends nothing of its own for presence, and its poll is held
// for minutes. What the agent keeps is the means to notice a black-holed
// connection (a NAT mapping dropped, a middlebox gone, the hub's host
// powered off) well inside the 10 minutes after which the hub fails an
// offline machine's workloads: its kernel probes after KeepAliveIdle without
// an answer from the hub (the hub's own probes do not count there), and
// drops the connection after KeepAliveCount unanswered probes, or when data
// it sent stays unacknowledged as long (unackedFor); the agent then redials
// with backoff and keeps applying its last desired state meanwhile. Its
// HTTP/2 ping comes only after a whole poll hold without a frame: the
// backstop for a hub whose kernel answers but whose process does not;
// with other replicas to move to, every ReplicaPingAfter (SetReplicated).
// docs/operations.md explains the choice, the bytes and NAT idle timeouts.
const (
	PingAfter        = 11 * time.Minute
	ReplicaPingAfter = 24 * time.Second
	PingTimeout      = 3 * time.Second
	KeepAliveIdle    = 4 * time.Minute
	KeepAliveIntvl   = 10 * time.Second
	KeepAliveCount   = 3
	unackedFor       = KeepAliveIdle + KeepAliveCount*KeepAliveIntvl
)

// maxAnswer bounds an answer from the hub: a desired state of thousands of
// workloads fits.
const maxAnswer = 16 << 20

// HubError is an error answer from the hub: its status code and its
// one-line message, which says what to do.
type HubError struct {
	Code    int
	Message string
	// RetryAfter is the hub's Retry-After, with 429 and 503.
	RetryAfter time.Duration
}

func (e *HubError) Error() string {
	return fmt.Sprintf("the hub answered %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// PinError is a hub whose certificate chain does not lead to the pinned CA.
// Nothing was sent to it.
type PinError struct{ Reason string }

func (e *PinError) Error() string {
	return "the hub's certificate does not lead to the pinned CA (" + e.Reason + "): this is not the hub the token or enrolment was made for, or something is intercepting the connection; check --hub; nothing was sent"
}

// ParseHubURL checks a hub's agent URL: https://HOST[:PORT], nothing more.
func ParseHubURL(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(strings.TrimSpace(s), "/"))
	if err != nil {
		return nil, fmt.Errorf("hub URL %q: %w", s, err)
	}
	if u.Scheme != "https" || u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("hub URL %q: want https://HOST:PORT, e.g. https://hub.example.com:8443", s)
	}
	return u, nil
}

// PinnedTLSConfig returns a TLS 1.3 client config that trusts exactly one
// CA: the one whose certificate has SHA-256 fingerprint fp. The hub must
// present that CA in its chain, and its certificate must be valid for the
// host (a name or an IP address); this is checked during the handshake,
// before any request is sent. There is no trust on first use.
func PinnedTLSConfig(fp [32]byte, host string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The standard verification is replaced, not skipped: it would
		// trust the system's CAs, and only the pinned one counts.
		InsecureSkipVerify: true,
		VerifyConnection:   func(cs tls.ConnectionState) error { return verifyPinned(cs, fp, host) },
	}
}

func verifyPinned(cs tls.ConnectionState, fp [32]byte, host string) error {
	if len(cs.PeerCertificates) == 0 {
		return &PinError{Reason: "it presented no certificate"}
	}
	var root *x509.Certificate
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		if protocol.FingerprintMatches(c.Raw, fp) {
			root = c
		} else {
			inter.AddCert(c)
		}
	}
	if root == nil {
		return &PinError{Reason: "no CA with fingerprint " + hex.EncodeToString(fp[:6]) + "… in its chain"}
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, DNSName: host,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return &PinError{Reason: err.Error()}
	}
	return nil
}

// NewDialer returns a dialer with TCP keepalives and the bound on
// unacknowledged data set as the package's constants say: what an agent's
// connections get, for a DialContext of one's own (tests, benchmarks).
func NewDialer() *net.Dialer { return NewDialerIdle(KeepAliveIdle) }

// NewDialerIdle is NewDialer with a keepalive idle time of idle, and the
// bound on unacknowledged data moved with it. It is for a benchmark that
// runs thousands of agents on one host: there, equal idle times put every
// agent's probes in one slot of the kernel's timer wheel, and the burst
// overflows loopback's backlog (docs/performance.md).
func NewDialerIdle(idle time.Duration) *net.Dialer {
	unacked := idle + KeepAliveCount*KeepAliveIntvl
	return &net.Dialer{
		Timeout: 10 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: idle, Interval: KeepAliveIntvl, Count: KeepAliveCount,
		},
		Control: func(_, _ string, rc syscall.RawConn) error {
			var err error
			if cerr := rc.Control(func(fd uintptr) { err = boundUnacked(fd, unacked) }); cerr != nil {
				return cerr
			}
			return err
		},
	}
}

func newHTTPTransport(tc *tls.Config) *http.Transport {
	return &http.Transport{
		DialContext:         NewDialer().DialContext,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: 15 * time.Second,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     2 * time.Minute,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: PingAfter, PingTimeout: PingTimeout},
	}
}

// Enroll posts req to the hub at hubURL, trusting only the CA with
// fingerprint fp: the connection is refused before the token or the CSR is
// sent if the hub cannot prove it holds that CA.
func Enroll(ctx context.Context, hubURL string, fp [32]byte, req *protocol.EnrollRequest) (*protocol.CertificateResponse, error) {
	return EnrollVia(ctx, nil, hubURL, fp, req)
}

// EnrollVia is Enroll with the TCP connection made by dial (nil: the
// package's dialer): the fleet benchmark enrols from many source addresses.
func EnrollVia(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), hubURL string, fp [32]byte, req *protocol.EnrollRequest) (*protocol.CertificateResponse, error) {
	u, err := ParseHubURL(hubURL)
	if err != nil {
		return nil, err
	}
	tr := newHTTPTransport(PinnedTLSConfig(fp, u.Hostname()))
	if dial != nil {
		tr.DialContext = dial
	}
	defer tr.CloseIdleConnections()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var out protocol.CertificateResponse
	if err := post(ctx, &http.Client{Transport: tr}, u.String()+protocol.EnrollPath, body, &out); err != nil {
		var he *HubError
		var pe *PinError
		var oe *net.OpError
		if !errors.As(err, &he) && !errors.As(err, &pe) && errors.As(err, &oe) {
			return nil, fmt.Errorf("%w (is the hub running, and reachable at that address? check --hub and firewalls)", err)
		}
		return nil, err
	}
	return &out, nil
}

// HTTPSConfig configures an HTTPS transport.
type HTTPSConfig struct {
	// URL is the hub's agent URL, https://HOST:PORT.
	URL string
	// CA is the hub's CA, pinned: only a hub presenting it is trusted.
	CA *x509.Certificate
	// Certificate is the machine's client certificate and key.
	Certificate tls.Certificate
	// Clock paces waits for Retry-After; nil means the wall clock.
	Clock clock.Clock
	// DialContext, if set, dials the hub's TCP connections instead of a
	// net.Dialer with the package's keepalives: for measurements.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// PingAfter and PingTimeout override the package's HTTP/2 health
	// check; zero means the constants.
	PingAfter, PingTimeout time.Duration
	// HTTP1 offers only HTTP/1.1, and HTTP2 only HTTP/2: for
	// measurements of the hub's cost per held poll (docs/performance.md).
	// An agent offers both and lets the hub choose (HTTP/1.1 on Linux,
	// where it parks held polls), and only HTTP/2 once it has replicas to
	// move to, for the pings that leave a hung one (SetReplicated).
	HTTP1, HTTP2 bool
}

// HTTPS is the transport of a networked agent: POST /agent/v1/sync over
// HTTPS with mutual TLS, over the protocol the hub chooses
// (protocolsLocked). Its client certificate can be swapped while syncs
// run (SetCertificate), and it follows directed reconnects. It is safe
// for concurrent use.
type HTTPS struct {
	fp   [32]byte
	clk  clock.Clock
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// pingSet is set when the config chose the ping (tests): it stays.
	pingSet bool
	// only is the protocols a config asked for (HTTP1, HTTP2); nil
	// means as the agent's.
	only *http.Protocols
	cert atomic.Pointer[tls.Certificate]

	// mu guards the following fields.
	mu sync.Mutex
	// ping is the HTTP/2 health check of the pools made from now on.
	ping http.HTTP2Config
	// replicated: the agent has other replicas to move to.
	replicated bool
	base       string
	cur        *pool
	notBefore  time.Time
	// diagnose is set after a connection the hub closed before it
	// answered: the next try (on the caller's backoff) is made so that a
	// refusal's alert can be read, on that try's one connection.
	diagnose bool
}

// pool is one connection pool: one client certificate and its TLS
// sessions. A retired pool closes its connections once they are idle, so
// new requests dial with the new certificate, not a resumed old session.
type pool struct {
	tr     *http.Transport
	client *http.Client
	// diag makes HTTP/1.1 connections that wait briefly for an alert
	// after the handshake; see dialDiagnostic.
	diag *http.Client
	// guarded by HTTPS.mu
	inflight int
	retired  bool
}

var _ Transport = (*HTTPS)(nil)

// NewHTTPS returns an HTTPS transport.
func NewHTTPS(cfg HTTPSConfig) (*HTTPS, error) {
	u, err := ParseHubURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.CA == nil || len(cfg.Certificate.Certificate) == 0 {
		return nil, errors.New("hubclient: a CA and a client certificate are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	t := &HTTPS{
		fp: protocol.FingerprintOf(cfg.CA.Raw), clk: cfg.Clock, dial: cfg.DialContext, base: u.String(),
		ping:    http.HTTP2Config{SendPingTimeout: cmp.Or(cfg.PingAfter, PingAfter), PingTimeout: cmp.Or(cfg.PingTimeout, PingTimeout)},
		pingSet: cfg.PingAfter != 0,
	}
	if cfg.HTTP1 || cfg.HTTP2 {
		t.only = new(http.Protocols)
		t.only.SetHTTP1(cfg.HTTP1)
		t.only.SetHTTP2(cfg.HTTP2)
	}
	c, err := withLeaf(cfg.Certificate)
	if err != nil {
		return nil, err
	}
	t.cert.Store(&c)
	t.cur = t.newPool()
	return t, nil
}

// newPool makes a pool for the hub at t.base.
func (t *HTTPS) newPool() *pool {
	u, _ := url.Parse(t.base)
	tc := PinnedTLSConfig(t.fp, u.Hostname())
	tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return t.cert.Load(), nil }
	tc.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	tr := newHTTPTransport(tc)
	ping := t.ping
	tr.HTTP2 = &ping
	if t.dial != nil {
		tr.DialContext = t.dial
	}
	protos := t.protocolsLocked()
	tr.Protocols = &protos
	if !protos.HTTP2() {
		tr.HTTP2 = nil
		tc.NextProtos = []string{"http/1.1"}
	}
	dtr := newHTTPTransport(tc)
	dtr.ForceAttemptHTTP2 = false
	dtr.HTTP2 = nil
	// A non-nil empty map turns HTTP/2 off: the diagnostic connection
	// speaks HTTP/1.1, where the hub sends nothing before the request.
	dtr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	dtr.MaxIdleConnsPerHost = 1
	dtr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialDiagnostic(ctx, tr.DialContext, tc, network, addr)
	}
	return &pool{tr: tr, client: &http.Client{Transport: tr}, diag: &http.Client{Transport: dtr}}
}

// alertWait is how long a diagnostic connection waits after its handshake
// for the hub to refuse the certificate. In TLS 1.3 the client's handshake
// ends before the hub has checked its certificate, so a refusal arrives as
// an alert just after; a request written at once can make the hub reset
// the connection, and the reset loses the alert.
const alertWait = time.Second

// dialDiagnostic dials one TLS connection, waits up to alertWait for an
// alert, and returns the connection for the request if none came: one
// connection per try, which either names the refusal or carries the sync.
func dialDiagnostic(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), tc *tls.Config, network, addr string) (net.Conn, error) {
	raw, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg := tc.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, explainTLS(err)
	}
	c.SetReadDeadline(time.Now().Add(alertWait))
	var b [1]byte
	_, rerr := c.Read(b[:])
	var ne net.Error
	if rerr == nil || !errors.As(rerr, &ne) || !ne.Timeout() {
		// An HTTP/1.1 hub sends nothing before the request: anything
		// here is a refusal, or a connection that is already gone.
		c.Close()
		if rerr == nil {
			return nil, errors.New("the hub sent data before the request")
		}
		return nil, explainTLS(rerr)
	}
	// A read timeout leaves a TLS connection usable.
	c.SetReadDeadline(time.Time{})
	return c, nil
}

// SetReplicated tells the transport whether the agent has other hub
// replicas to move to. With them, a hub that stops answering while its
// kernel still does (a hung or paused process) is left within
// ReplicaPingAfter+PingTimeout, for a ping every ReplicaPingAfter (just
// under the hub's keepalive idle time, so the pings replace its probes
// rather than come on top), and so it offers only HTTP/2; alone, with
// nowhere else to go, the agent waits for it (PingAfter over HTTP/2, no
// ping over HTTP/1.1). New connections take the change.
func (t *HTTPS) SetReplicated(replicated bool) {
	after := PingAfter
	if replicated {
		after = ReplicaPingAfter
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.protocolsLocked()
	t.replicated = replicated
	changed := t.protocolsLocked() != was
	if !t.pingSet && t.ping.SendPingTimeout != after {
		t.ping.SendPingTimeout = after
		changed = true
	}
	if changed {
		t.retireLocked()
	}
}

// protocolsLocked is what the transport offers the hub, which chooses.
// Alone, both: a hub on Linux takes HTTP/1.1 and parks the held polls,
// with no goroutine on them (docs/performance.md, "Held polls parked in
// the hub"); it knows when the agent's host last answered from its
// kernel, and an agent with nowhere else to go has no use for pings.
// With replicas, only HTTP/2, whose pings leave a hung replica within
// ReplicaPingAfter+PingTimeout; a parked poll has nothing reading them.
func (t *HTTPS) protocolsLocked() http.Protocols {
	if t.only != nil {
		return *t.only
	}
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetHTTP1(!t.replicated)
	return p
}

// URL is the hub URL the transport dials now.
func (t *HTTPS) URL() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.base
}

// Certificate is the client certificate in use.
func (t *HTTPS) Certificate() *tls.Certificate { return t.cert.Load() }

// SetCertificate swaps the client certificate atomically: the sync in
// flight finishes on its connection, and the next request dials a new one
// with the new certificate (no session of the old one is resumed). It
// refuses a certificate that does not parse.
func (t *HTTPS) SetCertificate(c tls.Certificate) error {
	c, err := withLeaf(c)
	if err != nil {
		return err
	}
	t.cert.Store(&c)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.retireLocked()
	return nil
}

// withLeaf fills in c.Leaf, which the transport reads for expiry.
func withLeaf(c tls.Certificate) (tls.Certificate, error) {
	if c.Leaf != nil {
		return c, nil
	}
	if len(c.Certificate) == 0 {
		return c, errors.New("hubclient: an empty client certificate")
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return c, fmt.Errorf("hubclient: client certificate: %w", err)
	}
	c.Leaf = leaf
	return c, nil
}

func (t *HTTPS) retireLocked() {
	old := t.cur
	old.retired = true
	if old.inflight == 0 {
		old.tr.CloseIdleConnections()
	}
	t.cur = t.newPool()
}

// Close closes idle connections.
func (t *HTTPS) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cur.tr.CloseIdleConnections()
}

// Sync posts the report and returns the hub's answer. A directed reconnect
// returns an error wrapping ErrReconnect.
func (t *HTTPS) Sync(ctx context.Context, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var resp protocol.SyncResponse
	if err := t.do(ctx, protocol.SyncPath, body, &resp); err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	if resp.Reconnect != nil {
		to, err := t.redirect(resp.Reconnect.URL)
		if err != nil {
			return nil, fmt.Errorf("sync: %w, to a URL this agent refuses: %w", ErrReconnect, err)
		}
		return nil, fmt.Errorf("sync: %w", &ReconnectError{To: to, Window: WindowOf(&resp)})
	}
	return &resp, nil
}

// ReconnectError is a directed reconnect; it wraps ErrReconnect. Window is
// set when the hub drains to its own address (it is restarting): the agent
// redials after a uniformly random part of it. A reconnect to another
// replica has none and stays immediate.
type ReconnectError struct {
	To     string
	Window time.Duration
}

func (e *ReconnectError) Error() string { return ErrReconnect.Error() + " to " + e.To }
func (e *ReconnectError) Unwrap() error { return ErrReconnect }

// Renew posts a CSR to /agent/v1/renew over the current client certificate
// and returns the new certificate. The caller installs it with
// SetCertificate once it has saved it.
func (t *HTTPS) Renew(ctx context.Context, csrPEM []byte) (*protocol.CertificateResponse, error) {
	body, err := json.Marshal(protocol.RenewRequest{CSR: string(csrPEM)})
	if err != nil {
		return nil, err
	}
	var out protocol.CertificateResponse
	if err := t.do(ctx, protocol.RenewPath, body, &out); err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	return &out, nil
}

// redirect follows a directed reconnect: to rawURL if set, else to the same
// hub, always on new connections.
func (t *HTTPS) redirect(rawURL string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var err error
	if rawURL != "" {
		var u *url.URL
		if u, err = ParseHubURL(rawURL); err == nil {
			t.base = u.String()
		}
	}
	t.retireLocked()
	return t.base, err
}

func (t *HTTPS) do(ctx context.Context, path string, body []byte, out any) error {
	t.mu.Lock()
	p, base, notBefore, diagnose := t.cur, t.base, t.notBefore, t.diagnose
	p.inflight++
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		p.inflight--
		if p.retired && p.inflight == 0 {
			p.tr.CloseIdleConnections()
		}
		t.mu.Unlock()
	}()
	// A hub that shed load said when to come back.
	if wait := notBefore.Sub(t.clk.Now()); wait > 0 && !clock.Sleep(t.clk, wait, ctx.Done()) {
		return ctx.Err()
	}
	client := p.client
	if diagnose {
		client = p.diag
		defer p.diag.CloseIdleConnections()
	}
	// A refusal ends a connection's first request; a request on a
	// connection that served before (a held poll when the hub went down)
	// needs no diagnosis.
	var reused atomic.Bool
	traced := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused.Store(i.Reused) }})
	err := post(traced, client, base+path, body, out)
	if ctx.Err() == nil {
		// No second connection now: the caller retries on its own
		// backoff, and that try reads the hub's reason.
		t.mu.Lock()
		t.diagnose = err != nil && !reused.Load() && closedEarly(err)
		t.mu.Unlock()
	}
	if leaf := t.cert.Load().Leaf; err != nil && ctx.Err() == nil && leaf != nil && t.clk.Now().After(leaf.NotAfter) {
		var refused *TLSRefusedError
		if !errors.As(err, &refused) {
			// The hub's refusal did not reach us intact; the reason is
			// plain from here.
			err = &TLSRefusedError{Alert: "expired certificate", Err: err}
		}
	}
	var he *HubError
	if errors.As(err, &he) && he.RetryAfter > 0 {
		// Honour Retry-After, plus up to a second of jitter so the
		// fleet does not come back in step.
		until := t.clk.Now().Add(he.RetryAfter + time.Duration(rand.Int64N(int64(time.Second))))
		t.mu.Lock()
		t.notBefore = until
		t.mu.Unlock()
	}
	return err
}

func post(ctx context.Context, client *http.Client, u string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return explainTLS(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("read the hub's answer: %w", err)
	}
	if len(b) > maxAnswer {
		return fmt.Errorf("the hub's answer is over %d bytes", maxAnswer)
	}
	if resp.StatusCode != http.StatusOK {
		he := &HubError{Code: resp.StatusCode}
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			he.Message = e.Error
		} else {
			he.Message = strings.Join(strings.Fields(string(b[:min(len(b), 200)])), " ")
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			he.RetryAfter = time.Duration(min(s, 3600)) * time.Second
		}
		return he
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode the hub's answer: %w", err)
	}
	return nil
}

// closedEarly reports whether err is a connection the hub closed before it
// answered: where a refused handshake's alert can be lost to a reset, or
// hidden behind HTTP/2's "could not be established".
func closedEarly(err error) bool {
	var refused *TLSRefusedError
	var he *HubError
	var pe *PinError
	if errors.As(err, &refused) || errors.As(err, &he) || errors.As(err, &pe) {
		return false
	}
	// A broken pipe is the hub closing after the refusal while the
	// request (or HTTP/2's preface) was being written.
	msg := err.Error()
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(msg, "connection reset by peer") || strings.Contains(msg, "broken pipe") ||
		strings.Contains(msg, "could not be established")
}

// TLSRefusedError is the hub refusing this machine's certificate during the
// handshake: revoked, unknown, expired, or from another CA.
type TLSRefusedError struct {
	Alert string
	Err   error
}

func (e *TLSRefusedError) Error() string {
	switch e.Alert {
	case "expired certificate":
		return "the hub refused this machine's certificate as expired; check this machine's clock (NTP), then enrol again with: einsora-agent enroll"
	case "unknown certificate authority":
		return "the hub does not know this machine's certificate (it is from another hub's CA); enrol with this hub: einsora-agent enroll"
	}
	return "the hub refused this machine's certificate (" + e.Alert + "): it was revoked, or the machine was removed; ask the hub's operator, then enrol again with: einsora-agent enroll"
}

func (e *TLSRefusedError) Unwrap() error { return e.Err }

// explainTLS turns a TLS alert from the hub into an error that says what
// to do; other errors pass as they are.
func explainTLS(err error) error {
	var pe *PinError
	if errors.As(err, &pe) {
		return pe
	}
	msg := err.Error()
	for _, a := range []string{"bad certificate", "expired certificate", "unknown certificate authority", "certificate revoked", "certificate required"} {
		if strings.Contains(msg, "remote error: tls: "+a) {
			return &TLSRefusedError{Alert: a, Err: err}
		}
	}
	return err
}
