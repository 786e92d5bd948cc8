package fleetbench

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/protocol"
)

// wake is an agent receiving a new desired state.
type wake struct {
	agent int
	// url is the replica that answered.
	url string
	at  time.Time
	ws  []protocol.DesiredWorkload
}

// fleet is N simulated agents, each syncing over its own mutual-TLS
// connection from its own loopback address with the project's hubclient.
type fleet struct {
	m      meter
	agents []*simAgent
	// wakes gets every new desired state; full means dropped, and a
	// waiter then times out and says so.
	wakes  chan wake
	errs   atomic.Int64
	causes causes
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type simAgent struct {
	i  int
	tr *hubclient.HTTPS
	// sync is tr, or tr failing over among replicas.
	sync hubclient.Transport
	// lastOK is when the last sync succeeded (Unix nanoseconds).
	lastOK atomic.Int64
}

// cred is one machine's client certificate and the hub's CA.
type cred struct {
	cert tls.Certificate
	ca   *x509.Certificate
}

// inventory is what each simulated machine reports: two CPUs, so a burst
// of one workload per machine fits beside the change phase's.
var inventory = protocol.Inventory{OS: "linux", Arch: "amd64", CPUs: 2, MemoryMB: 8192, Drivers: []string{"sim"}}

// newFleet makes an agent for each of creds; agent i syncs with
// urls[i mod len(urls)] and, when there are several, fails over to the
// others in turn (hubclient.Failover), as an agent given every replica's
// --hub does.
// Of protos, only the protocols the agents offer (HTTP1, HTTP2) count.
func newFleet(urls []string, creds []cred, protos hubclient.HTTPSConfig) (*fleet, error) {
	f := &fleet{wakes: make(chan wake, 4*len(creds)+64)}
	for i, c := range creds {
		tr, err := hubclient.NewHTTPS(hubclient.HTTPSConfig{
			URL: urls[i%len(urls)], CA: c.ca, Certificate: c.cert, DialContext: f.m.dialer(i),
			HTTP1: protos.HTTP1, HTTP2: protos.HTTP2,
		})
		if err != nil {
			return nil, fmt.Errorf("agent %d: %w", i, err)
		}
		a := &simAgent{i: i, tr: tr, sync: tr}
		if len(urls) > 1 {
			if a.sync, err = hubclient.NewFailover(tr, urls); err != nil {
				return nil, fmt.Errorf("agent %d: %w", i, err)
			}
		}
		f.agents = append(f.agents, a)
	}
	return f, nil
}

// start runs every agent's sync loop.
func (f *fleet) start() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	for _, a := range f.agents {
		f.wg.Go(func() { a.loop(ctx, f) })
	}
}

func (f *fleet) stop() {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
	for _, a := range f.agents {
		a.tr.Close()
	}
}

// loop syncs like an agent whose drivers do at once what they are told:
// it reports each desired workload in the mode it was given, and backs off
// with the agent's own backoff after an error.
func (a *simAgent) loop(ctx context.Context, f *fleet) {
	var bo hubclient.Backoff
	var storeID string
	var gen int64
	var ws []protocol.DesiredWorkload
	sentInventory := false
	started := time.Now()
	for ctx.Err() == nil {
		req := &protocol.SyncRequest{
			ProtocolVersion: protocol.Version, AgentVersion: "fleetbench", StoreID: storeID,
			Generation: gen, AppliedGeneration: gen, AgentStarted: started, Statuses: statuses(ws, gen),
		}
		if !sentInventory {
			inv := inventory
			req.Inventory = &inv
		}
		resp, err := a.sync.Sync(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, hubclient.ErrReconnect) {
				continue
			}
			f.errs.Add(1)
			f.causes.add(err)
			t := time.NewTimer(bo.Next())
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		bo.Reset()
		bo.Window = hubclient.WindowOf(resp) // as the agent does
		sentInventory = true
		a.lastOK.Store(time.Now().UnixNano())
		if resp.Unchanged {
			continue
		}
		storeID, gen, ws = resp.StoreID, resp.Generation, resp.Workloads
		select {
		case f.wakes <- wake{agent: a.i, url: a.tr.URL(), at: time.Now(), ws: ws}:
		default:
		}
	}
}

func statuses(ws []protocol.DesiredWorkload, gen int64) []protocol.Status {
	out := make([]protocol.Status, 0, len(ws))
	for _, w := range ws {
		code := protocol.CodeRunning
		switch w.Mode {
		case protocol.ModePark:
			code = protocol.CodeStopped
		case protocol.ModeRemove:
			code = protocol.CodeRemoved
		}
		out = append(out, protocol.Status{Workload: w.ID, Attempt: w.Attempt, Mode: w.Mode, Generation: gen, Code: code})
	}
	return out
}

// allSyncedSince waits until every agent has synced after t, or the
// deadline passes; it returns how many had.
func (f *fleet) allSyncedSince(t time.Time, deadline time.Duration) (int, bool) {
	end := time.Now().Add(deadline)
	for {
		n := 0
		for _, a := range f.agents {
			if a.lastOK.Load() > t.UnixNano() {
				n++
			}
		}
		if n == len(f.agents) {
			return n, true
		}
		if time.Now().After(end) {
			return n, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// onReplica is the agents whose sync goes to url now.
func (f *fleet) onReplica(url string) []*simAgent {
	var out []*simAgent
	for _, a := range f.agents {
		if a.tr.URL() == url {
			out = append(out, a)
		}
	}
	return out
}

// perReplica counts the agents whose sync goes to each of urls now.
func (f *fleet) perReplica(urls []string) []int {
	counts := make([]int, len(urls))
	for i, raw := range urls {
		if u, err := hubclient.ParseHubURL(raw); err == nil {
			counts[i] = len(f.onReplica(u.String()))
		}
	}
	return counts
}

// busiest is the index of the largest count, the first of equals.
func busiest(counts []int) int {
	best := 0
	for i, c := range counts {
		if c > counts[best] {
			best = i
		}
	}
	return best
}

// joinCounts writes counts as "a / b / c".
func joinCounts(counts []int) string {
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, " / ")
}

// drainWakes forgets the wakes so far.
func (f *fleet) drainWakes() {
	for {
		select {
		case <-f.wakes:
		default:
			return
		}
	}
}

// waitWorkload waits for an agent to be told of workload id in mode m and
// returns that wake.
func (f *fleet) waitWorkload(id string, m protocol.Mode, deadline time.Duration) (wake, error) {
	t := time.NewTimer(deadline)
	defer t.Stop()
	for {
		select {
		case w := <-f.wakes:
			for _, d := range w.ws {
				if d.ID == id && d.Mode == m {
					return w, nil
				}
			}
		case <-t.C:
			return wake{}, fmt.Errorf("no agent was told of %s in mode %s within %s", id, m, deadline)
		}
	}
}

// collector records when agents were first told of each workload.
type collector struct {
	mu    sync.Mutex
	first map[string]time.Time
	stop  chan struct{}
	done  chan struct{}
}

func (f *fleet) collect() *collector {
	c := &collector{first: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			case w := <-f.wakes:
				c.mu.Lock()
				for _, d := range w.ws {
					if _, ok := c.first[d.ID]; !ok {
						c.first[d.ID] = w.at
					}
				}
				c.mu.Unlock()
			}
		}
	}()
	return c
}

// waitAll waits until agents were told of every workload in ids and
// returns when the last was; then it stops collecting.
func (c *collector) waitAll(ids []string, deadline time.Duration) (time.Time, error) {
	defer func() { close(c.stop); <-c.done }()
	end := time.Now().Add(deadline)
	for {
		c.mu.Lock()
		var last time.Time
		left := 0
		for _, id := range ids {
			t, ok := c.first[id]
			if !ok {
				left++
			} else if t.After(last) {
				last = t
			}
		}
		c.mu.Unlock()
		if left == 0 {
			return last, nil
		}
		if time.Now().After(end) {
			return time.Time{}, fmt.Errorf("%d of %d workloads reached no agent within %s", left, len(ids), deadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// causes tallies failed syncs by kind, for a phase that retried more than
// it should to say why.
type causes struct {
	mu sync.Mutex
	n  map[string]int
}

// maxCauses bounds the tally: past it, new kinds count as "other".
const maxCauses = 16

func (c *causes) add(err error) {
	k := causeOf(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	if _, ok := c.n[k]; !ok && len(c.n) >= maxCauses {
		k = "other"
	}
	c.n[k]++
}

// take returns the tally, most frequent first, and starts a new one.
func (c *causes) take() string {
	c.mu.Lock()
	n := c.n
	c.n = nil
	c.mu.Unlock()
	keys := slices.Collect(maps.Keys(n))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(n[b], n[a]), cmp.Compare(a, b)) })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, n[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// causeOf names an error's kind without what varies between agents.
func causeOf(err error) string {
	var he *hubclient.HubError
	var tr *hubclient.TLSRefusedError
	var ne net.Error
	switch {
	case errors.As(err, &he):
		return fmt.Sprintf("HTTP %d", he.Code)
	case errors.As(err, &tr):
		return "TLS refused (" + tr.Alert + ")"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout" + opOf(err)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	case errors.As(err, &ne):
		return "network" + opOf(err)
	}
	return "other"
}

// opOf names a network error's operation and errno, " (read: connection
// reset by peer)", so a storm's failures tell a dial from a cut.
func opOf(err error) string {
	var oe *net.OpError
	var errno syscall.Errno
	switch {
	case errors.As(err, &oe) && errors.As(err, &errno):
		return " (" + oe.Op + ": " + errno.Error() + ")"
	case errors.As(err, &oe):
		return " (" + oe.Op + ")"
	}
	return ""
}
