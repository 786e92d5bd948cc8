package hub

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"einsora.dev/edge/clock"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// ErrUnavailable: what was asked for cannot be had now (a machine is
// offline or did not answer); the admin API answers 503.
var ErrUnavailable = errors.New("unavailable")

// Bounds of the log relay.
const (
	// MaxLogWantsPerMachine, MaxLogWantsPerTenant and MaxLogWants bound
	// the log requests waiting or streaming, per machine, per tenant and
	// in all.
	MaxLogWantsPerMachine = 8
	MaxLogWantsPerTenant  = 32
	MaxLogWants           = 256
	// DefaultLogConnectTimeout is how long a log request waits for the
	// machine's upload before it fails.
	DefaultLogConnectTimeout = 5 * time.Second
	// DefaultLogRate is the bytes per second one machine may upload, all
	// its uploads together.
	DefaultLogRate = 8 << 20
	// logBuffer is how many lines wait between an upload and its reader.
	logBuffer = 256
)

// LogOptions are what a user asks of a workload's output.
type LogOptions struct {
	// Tail sends the last Tail lines kept (0: all kept).
	Tail int
	// Since sends lines at or after it (zero: all kept).
	Since time.Time
	// Follow keeps sending lines as they come, until the workload is
	// removed or the caller leaves.
	Follow bool
	// Idle, if set, is called whenever no line is waiting: the moment
	// for a caller that buffers to flush.
	Idle func() error
}

// LocalLogs is an in-process agent's log store (solo): the hub reads the
// output of workloads on MachineID() through it rather than ask for an
// upload.
type LocalLogs interface {
	MachineID() string
	StreamLogs(ctx context.Context, req protocol.LogRequest, emit func(protocol.LogLine) error) error
}

// logRelay holds the log requests of admin callers until their machine's
// upload arrives, and relays its lines. Bounded per machine and in all.
type logRelay struct {
	mu         sync.Mutex
	wants      map[string]*logWant // by token
	perMachine map[string]int
	perTenant  map[string]int
	buckets    map[string]*bucket // by machine
	local      LocalLogs
	// connectTimeout and rate: zero reads as the defaults.
	connectTimeout time.Duration
	rate           int

	// remote holds other replicas' log requests (by token) until this
	// replica hands them to their machine or they expire; remotePerMachine
	// counts them. A notification is store-borne input, so both are
	// bounded like local wants. clk is set with the first one.
	remote           map[string]*remoteWant
	remotePerMachine map[string]int
	clk              clock.Clock
	// refused and refusedLogged space the log lines about refused
	// notifications: a flood of them is one line a minute.
	refused       int
	refusedLogged time.Time
}

// remoteWant is a log request another replica holds: its URL is where
// the machine must upload.
type remoteWant struct {
	machine string
	req     protocol.LogRequest
	expires time.Time
}

type logWant struct {
	machine string
	tenant  string
	req     protocol.LogRequest
	sent    bool // handed to the machine in a sync answer
	claimed bool // its upload arrived
	// connected is closed when the upload arrives, ended when it ends;
	// gone when the caller leaves.
	connected, ended, gone chan struct{}
	lines                  chan protocol.LogLine
}

// SetLocalLogs makes the hub read the output of workloads on l's machine
// through l (solo's in-process agent).
func (h *Hub) SetLocalLogs(l LocalLogs) {
	h.logs.mu.Lock()
	defer h.logs.mu.Unlock()
	h.logs.local = l
}

// SetLogLimits sets how long a log request waits for its machine's upload
// and the bytes per second one machine may upload; zero keeps a default.
func (h *Hub) SetLogLimits(connectTimeout time.Duration, bytesPerSecond int) {
	h.logs.mu.Lock()
	defer h.logs.mu.Unlock()
	h.logs.connectTimeout, h.logs.rate = connectTimeout, bytesPerSecond
}

// WorkloadLogs sends workload id's output to emit, as o asks: read from
// the in-process agent in solo, else asked of its machine in the next sync
// answer and relayed from the machine's upload. An offline machine, or
// one whose upload does not come within the connect timeout, is an
// ErrUnavailable naming it, never a hang.
func (h *Hub) WorkloadLogs(ctx context.Context, id string, o LogOptions, emit func(protocol.LogLine) error) error {
	if o.Tail < 0 {
		return fmt.Errorf("%w: tail %d: want 0 or more lines", ErrInvalid, o.Tail)
	}
	var w store.Workload
	var m store.Machine
	err := h.store.View(ctx, func(tx store.Tx) error {
		var err error
		if w, err = tx.Workload(id); err != nil {
			return err
		}
		if w.Machine == "" {
			return nil
		}
		m, err = tx.Machine(w.Machine)
		return err
	})
	if err != nil {
		return fmt.Errorf("logs of %s: %w", id, err)
	}
	if w.Machine == "" {
		return fmt.Errorf("%w: workload %s has not been placed on a machine, so it has no output", ErrUnavailable, id)
	}
	// With replicas, the upload is sent here by URL, whichever replica
	// holds the machine's poll (or its load balancer picks).
	req := protocol.LogRequest{Workload: id, Tail: o.Tail, Since: o.Since, Follow: o.Follow, URL: h.logURL()}
	idle := o.Idle
	if idle == nil {
		idle = func() error { return nil }
	}
	h.logs.mu.Lock()
	local := h.logs.local
	h.logs.mu.Unlock()
	if local != nil && local.MachineID() == w.Machine {
		// The in-process ring says nothing of what waits: idle after each.
		err := local.StreamLogs(ctx, req, func(l protocol.LogLine) error {
			if err := emit(l); err != nil {
				return err
			}
			return idle()
		})
		if err != nil {
			return err
		}
		return idle()
	}
	if !h.presence.online(m) {
		return fmt.Errorf("%w: machine %s (%s), which holds workload %s, is offline: silent for %s", ErrUnavailable,
			m.ID, m.Name, id, h.presence.offlineFor(m).Round(time.Second))
	}
	want, err := h.logs.register(w.Machine, w.Tenant, req)
	if err != nil {
		return err
	}
	defer h.logs.unregister(want)
	// The machine's poll held here is woken; one held by another replica
	// is woken by that replica when the notification reaches it. A poll
	// held here takes the request now: the others need not hold it.
	heldHere := h.polls.connected(w.Machine)
	h.Wake(w.Machine)
	if req.URL != "" && !heldHere {
		h.publishLogWant(ctx, w.Machine, want.req)
	}

	timeout := h.logs.connectTimeout
	if timeout <= 0 {
		timeout = DefaultLogConnectTimeout
	}
	t := h.clk.NewTimer(timeout)
	select {
	case <-want.connected:
		t.Stop()
	case <-t.C():
		if req.URL != "" {
			return fmt.Errorf("%w: machine %s (%s) did not send the output of workload %s to this replica (%s) within %s; "+
				"an agent older than the hub uploads to the replica it polls instead: upgrade it, or ask the replica it polls", ErrUnavailable, m.ID, m.Name, id, req.URL, timeout)
		}
		return fmt.Errorf("%w: machine %s (%s) did not send the output of workload %s within %s", ErrUnavailable, m.ID, m.Name, id, timeout)
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
	for {
		select {
		case l := <-want.lines:
			if err := emit(l); err != nil {
				return err
			}
			if len(want.lines) == 0 {
				if err := idle(); err != nil {
					return err
				}
			}
		case <-want.ended:
			// Lines sent before the end are still buffered.
			for {
				select {
				case l := <-want.lines:
					if err := emit(l); err != nil {
						return err
					}
				default:
					return idle()
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *logRelay) register(machine, tenant string, req protocol.LogRequest) (*logWant, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wants == nil {
		r.wants, r.perMachine, r.perTenant = map[string]*logWant{}, map[string]int{}, map[string]int{}
	}
	if r.perTenant[tenant] >= MaxLogWantsPerTenant {
		return nil, fmt.Errorf("%w: tenant %s already streams %d workload outputs; try again when one ends", ErrUnavailable, tenant, MaxLogWantsPerTenant)
	}
	if r.perMachine[machine] >= MaxLogWantsPerMachine {
		return nil, fmt.Errorf("%w: machine %s already streams %d workload outputs; try again when one ends", ErrUnavailable, machine, MaxLogWantsPerMachine)
	}
	if len(r.wants) >= MaxLogWants {
		return nil, fmt.Errorf("%w: the hub already streams %d workload outputs; try again when one ends", ErrUnavailable, MaxLogWants)
	}
	var b [16]byte
	rand.Read(b[:])
	req.Token = hex.EncodeToString(b[:])
	w := &logWant{machine: machine, tenant: tenant, req: req, connected: make(chan struct{}), ended: make(chan struct{}),
		gone: make(chan struct{}), lines: make(chan protocol.LogLine, logBuffer)}
	r.wants[req.Token] = w
	r.perMachine[machine]++
	r.perTenant[tenant]++
	return w, nil
}

func (r *logRelay) unregister(w *logWant) {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(w.gone)
	delete(r.wants, w.req.Token)
	if r.perMachine[w.machine]--; r.perMachine[w.machine] <= 0 {
		delete(r.perMachine, w.machine)
		delete(r.buckets, w.machine)
	}
	if r.perTenant[w.tenant]--; r.perTenant[w.tenant] <= 0 {
		delete(r.perTenant, w.tenant)
	}
}

// pending reports whether machine has log requests not yet handed to it.
func (r *logRelay) pending(machine string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.remotePerMachine[machine] > 0 {
		r.pruneLocked()
		if r.remotePerMachine[machine] > 0 {
			return true
		}
	}
	if r.perMachine[machine] == 0 {
		return false
	}
	for _, w := range r.wants {
		if w.machine == machine && !w.sent {
			return true
		}
	}
	return false
}

// take returns machine's log requests not yet handed to it, its own and
// other replicas', marking them handed: each goes out in one sync answer.
// Another replica's is then forgotten here: its upload goes to its URL.
func (r *logRelay) take(machine string) []protocol.LogRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []protocol.LogRequest
	if r.remotePerMachine[machine] > 0 {
		r.pruneLocked()
		for tok, rw := range r.remote {
			if rw.machine == machine && len(out) < protocol.MaxLogRequests {
				out = append(out, rw.req)
				r.dropRemoteLocked(tok, rw)
			}
		}
	}
	if r.perMachine[machine] == 0 {
		return out
	}
	for _, w := range r.wants {
		if w.machine == machine && !w.sent && len(out) < protocol.MaxLogRequests {
			w.sent = true
			out = append(out, w.req)
		}
	}
	return out
}

// ErrUnknownLogToken refuses an upload that answers no waiting request:
// the caller left, or the token is another machine's.
var ErrUnknownLogToken = fmt.Errorf("%w: no log request of this machine has that token (its reader may have left)", ErrForbidden)

// AcceptLogs reads machineID's upload for token, LogLine JSON one per
// line, and relays each line to the request waiting for it. It returns nil
// when the reader leaves (the upload is then closed) or the upload ends;
// an error for a line that does not decode or a token that answers
// nothing. Uploads of one machine share a rate of bytes per second.
func (h *Hub) AcceptLogs(ctx context.Context, machineID, token string, body io.Reader) error {
	w, b, err := h.logs.claim(machineID, token, h.clk)
	if err != nil {
		return err
	}
	defer close(w.ended)
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), protocol.MaxLogLineBytes)
	for sc.Scan() {
		raw := sc.Bytes()
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		if wait := b.take(len(raw) + 1); wait > 0 {
			if !clock.Sleep(h.clk, wait, w.gone) {
				return nil
			}
		}
		l, err := DecodeLogLine(raw)
		if err != nil {
			return err
		}
		select {
		case w.lines <- l:
		case <-w.gone:
			return nil // nobody listens: close the upload
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		select {
		case <-w.gone:
			return nil
		default:
		}
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%w: log upload: a line over %d bytes", ErrBadRequest, protocol.MaxLogLineBytes)
		}
		return fmt.Errorf("log upload: %w", err)
	}
	return nil
}

func (r *logRelay) claim(machine, token string, clk clock.Clock) (*logWant, *bucket, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.wants[token]
	if w == nil || w.machine != machine || w.claimed {
		return nil, nil, ErrUnknownLogToken
	}
	w.claimed = true
	close(w.connected)
	if r.buckets == nil {
		r.buckets = map[string]*bucket{}
	}
	b := r.buckets[machine]
	if b == nil {
		rate := r.rate
		if rate <= 0 {
			rate = DefaultLogRate
		}
		b = newBucket(clk, rate, max(rate, 2*protocol.MaxLogLineBytes))
		r.buckets[machine] = b
	}
	return w, b, nil
}

// bucket is a token bucket of bytes, on the hub's clock.
type bucket struct {
	mu     sync.Mutex
	clk    clock.Clock
	rate   float64 // bytes per second
	burst  float64
	tokens float64
	at     time.Time
}

func newBucket(clk clock.Clock, rate, burst int) *bucket {
	return &bucket{clk: clk, rate: float64(rate), burst: float64(burst), tokens: float64(burst), at: clk.Now()}
}

// take spends n bytes and returns how long to wait before sending them.
func (b *bucket) take(n int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
	b.at = now
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// DecodeLogLine reads one line of a machine's log upload: one LogLine
// object, no unknown fields, nothing after it, at most
// protocol.MaxLogLineBytes. It is the decoder of untrusted input that
// FuzzDecodeLogLine exercises.
func DecodeLogLine(raw []byte) (protocol.LogLine, error) {
	var l protocol.LogLine
	if len(raw) > protocol.MaxLogLineBytes {
		return l, fmt.Errorf("%w: log upload: a line over %d bytes", ErrBadRequest, protocol.MaxLogLineBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return protocol.LogLine{}, fmt.Errorf("%w: log upload: a line does not decode: %v", ErrBadRequest, err)
	}
	if dec.More() {
		return protocol.LogLine{}, fmt.Errorf("%w: log upload: data after a line's object", ErrBadRequest)
	}
	return l, nil
}

// Bounds of other replicas' log requests held here until handed out.
const (
	MaxRemoteLogWantsPerMachine = MaxLogWantsPerMachine
	MaxRemoteLogWants           = MaxLogWants
)

// errDuplicateLogWant: a request already held here (this replica's own,
// come back through the store, or one notified twice).
var errDuplicateLogWant = errors.New("a log request with that token is already held here")

// addRemote holds another replica's log request for machine until
// machine's next sync answer here, or the connect timeout: by then the
// replica that asked has given up.
func (r *logRelay) addRemote(machine string, req protocol.LogRequest, clk clock.Clock) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.remote == nil {
		r.remote, r.remotePerMachine = map[string]*remoteWant{}, map[string]int{}
	}
	r.clk = clk
	r.pruneLocked()
	if r.wants[req.Token] != nil || r.remote[req.Token] != nil {
		return errDuplicateLogWant
	}
	if r.remotePerMachine[machine] >= MaxRemoteLogWantsPerMachine {
		return fmt.Errorf("%w: machine %s already has %d log requests of other replicas waiting here", ErrUnavailable, machine, MaxRemoteLogWantsPerMachine)
	}
	if len(r.remote) >= MaxRemoteLogWants {
		return fmt.Errorf("%w: %d log requests of other replicas already wait here", ErrUnavailable, MaxRemoteLogWants)
	}
	timeout := r.connectTimeout
	if timeout <= 0 {
		timeout = DefaultLogConnectTimeout
	}
	r.remote[req.Token] = &remoteWant{machine: machine, req: req, expires: clk.Now().Add(timeout)}
	r.remotePerMachine[machine]++
	return nil
}

// pruneLocked forgets other replicas' requests past their connect
// timeout.
func (r *logRelay) pruneLocked() {
	if len(r.remote) == 0 || r.clk == nil {
		return
	}
	now := r.clk.Now()
	for tok, rw := range r.remote {
		if !now.Before(rw.expires) {
			r.dropRemoteLocked(tok, rw)
		}
	}
}

func (r *logRelay) dropRemoteLocked(tok string, rw *remoteWant) {
	delete(r.remote, tok)
	if r.remotePerMachine[rw.machine]--; r.remotePerMachine[rw.machine] <= 0 {
		delete(r.remotePerMachine, rw.machine)
	}
}

// noteRefused counts a refused notification and reports whether to log
// it now (at most once a minute) and how many it stands for.
func (r *logRelay) noteRefused(now time.Time) (log bool, count int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused++
	if !r.refusedLogged.IsZero() && now.Sub(r.refusedLogged) < droppedLogEvery {
		return false, 0
	}
	count, r.refused, r.refusedLogged = r.refused, 0, now
	return true, count
}
