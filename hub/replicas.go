package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"einsora.dev/edge/hub/trust"
	"einsora.dev/edge/protocol"
)

// replicaWaker is implemented by stores that carry wake-ups between hub
// replicas (PostgreSQL's LISTEN/NOTIFY). A change committed on one replica
// must reach the replica holding the machine's long poll, and a report
// recorded on one must reach the region's controller, wherever it runs:
// the store's notification channel carries both, with no presence table.
type replicaWaker interface {
	Notify(ctx context.Context, payload string) error
	Listen(ctx context.Context, wake func(payload string)) error
}

// observePrefix marks a notification for the controller: a machine's
// report changed. admitPayload and capacityPayload wake the controller: a
// workload waits, or capacity may have grown; capacityPayload may be
// followed by the ID of the machine whose record or holdings changed, for
// the leader's capacity view. logsPrefix marks a log request held by the
// replica that sent it (logNote). Any other payload is a machine to wake,
// whose desired state (so what it holds) changed.
const (
	observePrefix   = "observe:"
	admitPayload    = "admit:"
	capacityPayload = "capacity:"
	logsPrefix      = "logs:"
)

// wakeLeader wakes the region's controller, here and on whichever replica
// leads, after an admin change: without it a change made on a standby
// would wait for the leader's ControllerInterval. capacity says the
// change may have freed or added capacity; machines are those whose
// record or holdings it changed, which the leader's capacity view reads
// again.
func (h *Hub) wakeLeader(ctx context.Context, capacity bool, machines ...string) {
	if !capacity {
		h.wakeControllers()
		h.notifyReplicas(ctx, admitPayload)
		return
	}
	h.machinesChanged(machines...)
	h.capacityChanged()
	if len(machines) == 0 {
		h.notifyReplicas(ctx, capacityPayload)
	}
	for _, id := range slices.Compact(slices.Sorted(slices.Values(machines))) {
		h.notifyReplicas(ctx, capacityPayload+id)
	}
}

// notifyReplicas tells the other replicas, when the store has any.
func (h *Hub) notifyReplicas(ctx context.Context, payload string) {
	rw, ok := h.store.(replicaWaker)
	if !ok {
		return
	}
	// The caller's commit stands whatever happens here; a lost
	// notification costs at most one poll timeout of latency.
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := rw.Notify(nctx, payload); err != nil {
		h.log.Warn("cannot notify the other hub replicas; they learn of it at their next poll", "err", err)
	}
}

// listenReplicas delivers the other replicas' notifications until ctx is
// done. What it starts, it starts in wg, so its owner waits for it.
func (h *Hub) listenReplicas(ctx context.Context, wg *sync.WaitGroup) {
	rw, ok := h.store.(replicaWaker)
	if !ok {
		return
	}
	err := rw.Listen(ctx, func(payload string) {
		switch {
		case payload == "":
			// Notifications may have been missed: wake everything,
			// observe everything.
			h.polls.wakeEvery()
			// Off the listener's goroutine: it reads the store.
			h.forgetViews()
			wg.Go(func() {
				h.markAllDirty(ctx)
				h.wakeControllers()
			})
		case payload == admitPayload:
			h.wakeControllers()
		case strings.HasPrefix(payload, capacityPayload):
			if id := strings.TrimPrefix(payload, capacityPayload); id != "" {
				h.machinesChanged(id)
			}
			h.capacityChanged()
		case strings.HasPrefix(payload, logsPrefix):
			h.acceptLogNote(strings.TrimPrefix(payload, logsPrefix))
		case strings.HasPrefix(payload, observePrefix):
			h.markDirty(strings.TrimPrefix(payload, observePrefix))
		default:
			// The other replica's commit time is not known here, so
			// this wake-up is left out of wake latency.
			h.polls.wake(payload, time.Time{})
			h.machinesChanged(payload)
		}
	})
	if err != nil && ctx.Err() == nil {
		h.log.Error("cannot listen for the other hub replicas' notifications", "err", err)
	}
}

// maxLogNote bounds a logs: notification (PostgreSQL refuses payloads of
// 8000 bytes or more); the longest valid one is about 1 KiB.
const maxLogNote = 2048

// logNote is a log request published by the replica that holds it, for
// the replica that holds (or next gets) the machine's poll: the payload
// of a logs: notification, JSON.
type logNote struct {
	Machine  string    `json:"m"`
	Token    string    `json:"t"`
	Workload string    `json:"w"`
	Tail     int       `json:"n,omitempty"`
	Since    time.Time `json:"s,omitzero"`
	Follow   bool      `json:"f,omitempty"`
	URL      string    `json:"u"`
}

// logURL is the URL this replica's log requests carry: Config.URL when
// the store has other replicas to tell, else "" (the upload goes to the
// hub the agent syncs with, as with one replica).
func (h *Hub) logURL() string {
	if _, ok := h.store.(replicaWaker); !ok || h.cfg.URL == "" {
		return ""
	}
	u := strings.TrimRight(h.cfg.URL, "/")
	if err := protocol.CheckHubURL(u); err != nil {
		h.log.Warn("this replica's URL cannot carry log requests; the output of a machine polling another replica will not reach it", "url", u, "err", err)
		return ""
	}
	return u
}

// publishLogWant tells the other replicas of a log request held here, so
// that whichever holds machine's poll hands it out with this replica's
// URL.
func (h *Hub) publishLogWant(ctx context.Context, machine string, req protocol.LogRequest) {
	payload, err := encodeLogNote(machine, req)
	if err != nil {
		h.log.Warn("cannot tell the other replicas of a log request; a machine polling another replica will not send it", "machine", machine, "err", err)
		return
	}
	h.notifyReplicas(ctx, logsPrefix+payload)
}

// acceptLogNote holds another replica's log request for its machine and
// wakes the machine's poll, if held here, to hand it out.
func (h *Hub) acceptLogNote(body string) {
	machine, req, err := decodeLogNote(body)
	if err == nil && req.URL == strings.TrimRight(h.cfg.URL, "/") {
		return // this replica's own, come back through the store
	}
	if err == nil {
		err = h.logs.addRemote(machine, req, h.clk)
	}
	if errors.Is(err, errDuplicateLogWant) {
		return
	}
	if err != nil {
		if log, n := h.logs.noteRefused(h.clk.Now()); log {
			h.log.Warn("refused another replica's log request", "err", err, "refused", n, "since", droppedLogEvery)
		}
		return
	}
	h.polls.wake(machine, time.Time{})
}

func encodeLogNote(machine string, req protocol.LogRequest) (string, error) {
	n := logNote{Machine: machine, Token: req.Token, Workload: req.Workload, Tail: req.Tail, Since: req.Since, Follow: req.Follow, URL: req.URL}
	if err := n.check(); err != nil {
		return "", err
	}
	b, err := json.Marshal(n)
	if err != nil {
		return "", err
	}
	if len(b) > maxLogNote {
		return "", fmt.Errorf("log request notification of %d bytes, at most %d", len(b), maxLogNote)
	}
	return string(b), nil
}

// decodeLogNote reads a logs: notification's body: store-borne input,
// from a replica or from anyone who can NOTIFY on the database. One
// object, no unknown fields, nothing after it, at most maxLogNote bytes,
// every field checked. FuzzDecodeLogNote exercises it.
func decodeLogNote(body string) (string, protocol.LogRequest, error) {
	if len(body) > maxLogNote {
		return "", protocol.LogRequest{}, fmt.Errorf("%w: log request notification of %d bytes, at most %d", ErrBadRequest, len(body), maxLogNote)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(body)))
	dec.DisallowUnknownFields()
	var n logNote
	if err := dec.Decode(&n); err != nil {
		return "", protocol.LogRequest{}, fmt.Errorf("%w: log request notification does not decode: %v", ErrBadRequest, err)
	}
	if dec.More() {
		return "", protocol.LogRequest{}, fmt.Errorf("%w: log request notification: data after its object", ErrBadRequest)
	}
	if err := n.check(); err != nil {
		return "", protocol.LogRequest{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return n.Machine, protocol.LogRequest{Token: n.Token, Workload: n.Workload, Tail: n.Tail, Since: n.Since, Follow: n.Follow, URL: n.URL}, nil
}

func (n *logNote) check() error {
	for _, f := range []struct{ name, v string }{{"machine", n.Machine}, {"workload", n.Workload}} {
		if f.v == "" || len(f.v) > protocol.MaxIDLength || trust.Text(f.v, protocol.MaxIDLength) != f.v {
			return fmt.Errorf("log request notification: %s ID of %d bytes that is empty, too long or not plain text", f.name, len(f.v))
		}
	}
	if len(n.Token) != 32 || strings.Trim(n.Token, "0123456789abcdef") != "" {
		return errors.New("log request notification: a token that is not 32 lowercase hex digits")
	}
	if n.Tail < 0 {
		return fmt.Errorf("log request notification: tail %d", n.Tail)
	}
	if y := n.Since.Year(); !n.Since.IsZero() && (y < 1 || y > 9999) {
		return errors.New("log request notification: a since out of range")
	}
	if err := protocol.CheckHubURL(n.URL); err != nil {
		return fmt.Errorf("log request notification: %w", err)
	}
	return nil
}
