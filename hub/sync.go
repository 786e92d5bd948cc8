package hub

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Errors Sync returns; the HTTP layer maps them to status codes.
var (
	ErrUnknownMachine = errors.New("unknown machine")
	ErrBadRequest     = errors.New("bad request")
	// ErrSuperseded: a newer poll of the same machine replaced this one.
	ErrSuperseded = errors.New("a newer poll of this machine replaced this one; if two agents share this machine's identity, give one a new machine ID and enrol it")
)

// polls holds the waiting long polls: one per machine, with its wake
// channel. Waking closes the channel. A new poll of a machine replaces the
// one waiting, which is answered with ErrSuperseded.
type polls struct {
	// held counts the polls holding now, past their work: load shedding
	// leaves them out.
	held atomic.Int64
	// mu guards the following fields.
	mu      sync.Mutex
	waiting map[string]*poll
}

type poll struct {
	wake chan struct{}
	// superseded is set, under polls.mu, when a newer poll replaced this one.
	superseded bool
}

// wait registers a poll of machineID, replacing the one waiting, and
// returns it with a release func to call when the poll stops waiting.
func (p *polls) wait(machineID string) (*poll, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.waiting[machineID]; old != nil {
		old.superseded = true
		close(old.wake)
	}
	w := &poll{wake: make(chan struct{})}
	p.waiting[machineID] = w
	return w, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.waiting[machineID] == w {
			delete(p.waiting, machineID)
		}
	}
}

func (p *polls) isSuperseded(w *poll) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return w.superseded
}

// wake answers the poll waiting for machineID.
func (p *polls) wake(machineID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.waiting[machineID]; w != nil {
		close(w.wake)
		delete(p.waiting, machineID)
	}
}

// wakeEvery answers every waiting poll: after a replica's notifications
// may have been missed, each agent fetches its desired state again.
func (p *polls) wakeEvery() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, w := range p.waiting {
		close(w.wake)
		delete(p.waiting, id)
	}
}

// connected reports whether a poll of machineID is waiting now.
func (p *polls) connected(machineID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting[machineID] != nil
}

// Wake answers machineID's waiting long poll at once, so its agent fetches
// its desired state. It is all that Backend.Run, Park and Delete do.
func (h *Hub) Wake(machineID string) { h.polls.wake(machineID) }

// Sync is the one call of the agent protocol, for the machine machineID
// (named by its client certificate, or the in-process agent's ID). It
// records the report, then answers with the machine's complete desired state
// at once when the agent's generation is behind, or holds the call until the
// machine is woken or the poll timeout passes.
func (h *Hub) Sync(ctx context.Context, machineID string, req *protocol.SyncRequest) (*protocol.SyncResponse, error) {
	if err := checkRequest(req); err != nil {
		return nil, fmt.Errorf("sync %s: %w: %w", machineID, ErrBadRequest, err)
	}
	// Wait before reading the generation, so a wake between the read and
	// the wait is not lost.
	w, release := h.polls.wait(machineID)
	defer release()
	gen, news, err := h.record(machineID, req)
	if err != nil {
		return nil, err
	}
	if news {
		h.markDirty(machineID)
		h.notifyReplicas(ctx, observePrefix+machineID)
	}
	if req.StoreID == h.store.ID() && req.Generation == gen {
		t := h.clk.NewTimer(h.cfg.PollTimeout)
		h.polls.held.Add(1)
		select {
		case <-w.wake:
			h.polls.held.Add(-1)
			t.Stop()
			if h.polls.isSuperseded(w) {
				return nil, fmt.Errorf("sync %s: %w", machineID, ErrSuperseded)
			}
		case <-t.C():
			h.polls.held.Add(-1)
			return &protocol.SyncResponse{StoreID: h.store.ID(), Generation: gen, Unchanged: true, HubTime: h.clk.Now()}, nil
		case <-ctx.Done():
			h.polls.held.Add(-1)
			t.Stop()
			return nil, ctx.Err()
		}
	}
	return h.Desired(ctx, machineID)
}

var codePattern = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

// checkRequest refuses what no honest agent sends. Bounds on text are
// applied later, by truncation, since they decide nothing.
func checkRequest(req *protocol.SyncRequest) error {
	if req == nil {
		return errors.New("empty request")
	}
	if err := checkAgentProtocol(req.ProtocolVersion, protocol.Version); err != nil {
		return err
	}
	if req.Generation < 0 || req.AppliedGeneration < 0 {
		return errors.New("negative generation")
	}
	if len(req.Statuses) > protocol.MaxStatuses {
		return fmt.Errorf("%d statuses, at most %d", len(req.Statuses), protocol.MaxStatuses)
	}
	for _, s := range req.Statuses {
		// What reaches the store must be text any database takes, or one
		// agent's report could fail the batch it is written with.
		if s.Workload == "" || len(s.Workload) > protocol.MaxIDLength || bound(s.Workload, protocol.MaxIDLength) != s.Workload {
			return fmt.Errorf("status with a workload ID of %d bytes that is empty, too long or not plain text", len(s.Workload))
		}
		if !codePattern.MatchString(string(s.Code)) {
			return fmt.Errorf("status of %s: code %q is not a word of at most 64 lowercase letters, digits and _", s.Workload, bound(string(s.Code), 64))
		}
		if s.Mode != "" && !s.Mode.Valid() {
			return fmt.Errorf("status of %s: unknown mode", s.Workload)
		}
	}
	return nil
}

// record saves what the agent reported and returns the machine's current
// generation, and whether there is news for the controller: a changed
// status, or a machine back from silence. An unchanged report of a machine
// in touch costs the controller nothing. Reports arriving together are
// written in one transaction (group commit, see reports).
func (h *Hub) record(machineID string, req *protocol.SyncRequest) (gen int64, news bool, err error) {
	p := &report{machineID: machineID, req: req, done: make(chan struct{}), lead: make(chan struct{})}
	h.reports.submit(p, h.commitReports)
	return p.gen, p.news, p.err
}

// reports batches the sync path's writes: the reports that arrive while one
// batch commits make up the next, so a thousand agents reporting at once
// (after a hub restart, say) cost a handful of transactions, not a thousand.
// There is no goroutine of its own: the first caller of a batch commits it,
// then hands the lead to the first caller waiting.
type reports struct {
	// mu guards the following fields.
	mu      sync.Mutex
	queue   []*report
	leading bool
}

type report struct {
	machineID string
	req       *protocol.SyncRequest
	// Set by the commit, before done is closed.
	gen  int64
	news bool
	err  error
	done chan struct{}
	// lead is closed to hand this caller the next batch.
	lead chan struct{}
}

// submit queues p and returns once it is committed. It does not give up
// on a cancelled caller: a queued report is written anyway, and a caller
// that left could not take the lead it may be handed.
func (r *reports) submit(p *report, commit func([]*report)) {
	r.mu.Lock()
	r.queue = append(r.queue, p)
	first := !r.leading
	r.leading = true
	r.mu.Unlock()
	if !first {
		select {
		case <-p.done:
			return
		case <-p.lead:
		}
	}
	r.mu.Lock()
	batch := r.queue
	r.queue = nil
	r.mu.Unlock()
	commit(batch)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 {
		r.leading = false
		return
	}
	close(r.queue[0].lead)
}

// commitReports writes a batch in one transaction. A report refused on its
// own (an unknown or revoked machine) fails alone; a failing store fails
// the batch.
func (h *Hub) commitReports(batch []*report) {
	now := h.clk.Now()
	// No caller's context: the batch is everyone's.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := h.store.Update(ctx, func(tx store.Tx) error {
		for _, p := range batch {
			p.gen, p.news, p.err = 0, false, nil
			if err := h.recordOne(tx, p, now); err != nil {
				if errors.Is(err, ErrUnknownMachine) || errors.Is(err, ErrRevoked) {
					p.err = err
					continue
				}
				return err
			}
		}
		return nil
	})
	for _, p := range batch {
		if err != nil {
			p.err = err
		}
		close(p.done)
	}
}

// recordOne writes one report within a batch's transaction.
func (h *Hub) recordOne(tx store.Tx, p *report, now time.Time) error {
	m, err := tx.Machine(p.machineID)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("sync %s: %w", p.machineID, ErrUnknownMachine)
	}
	if err != nil {
		return err
	}
	if m.Revoked {
		return fmt.Errorf("sync %s: %w", p.machineID, ErrRevoked)
	}
	p.gen = m.Generation
	// (Not h.online: this very poll already counts as connected.)
	p.news = now.Sub(m.LastSync) >= h.cfg.OfflineAfter || m.LastSync.Before(h.started)
	if err := h.noteReturn(tx, m, p.req, now); err != nil {
		return err
	}
	m.LastSync = now
	m.ReportedGeneration = p.req.Generation
	m.AppliedGeneration = p.req.AppliedGeneration
	m.AgentVersion = bound(p.req.AgentVersion, protocol.MaxVersionLen)
	if p.req.BootID != "" {
		m.BootID = bound(p.req.BootID, protocol.MaxIDLength)
	}
	if !p.req.AgentStarted.IsZero() {
		m.AgentStarted = p.req.AgentStarted
	}
	if p.req.Inventory != nil {
		h.acceptInventory(&m, p.req.Inventory)
	}
	if p.req.PreviousStoreID != "" {
		h.log.Warn("agent reports that it saw the store change and kept what it held",
			"machine", p.machineID, "previous_store", bound(p.req.PreviousStoreID, protocol.MaxIDLength))
	}
	if err := tx.PutMachine(m); err != nil {
		return err
	}
	before, err := tx.Statuses(p.machineID)
	if err != nil {
		return err
	}
	since := make(map[string]store.StatusRecord, len(before))
	for _, s := range before {
		since[s.Workload] = s
	}
	for _, s := range p.req.Statuses {
		s.Detail = bound(s.Detail, protocol.MaxDetail)
		rec := store.StatusRecord{Machine: p.machineID, Status: s, At: now}
		// At is when the status took its present form: an agent
		// repeats its statuses on every sync, and repeating
		// "progressing" is not progress.
		if old, ok := since[s.Workload]; ok && sameReport(old.Status, s) {
			if old.Generation == s.Generation {
				continue
			}
			rec.At = old.At
		}
		if err := tx.PutStatus(rec); err != nil {
			return err
		}
		p.news = true
	}
	return nil
}

// noteReturn writes on the timeline of a machine's workloads what happened
// while the hub did not hear from it: a reboot (its workloads' processes are
// gone), a restarted agent, or a partition (cut off, still running). The
// boot ID and the agent's start time in each sync tell them apart.
func (h *Hub) noteReturn(tx store.Tx, m store.Machine, req *protocol.SyncRequest, now time.Time) error {
	if m.LastSync.IsZero() {
		return nil
	}
	away := now.Sub(m.LastSync)
	var text string
	switch {
	case m.BootID != "" && req.BootID != "" && m.BootID != bound(req.BootID, protocol.MaxIDLength):
		text = fmt.Sprintf("machine %s rebooted (last heard %s before); what ran there was restarted or is gone", m.ID, away.Round(time.Second))
	case !m.AgentStarted.IsZero() && !req.AgentStarted.Equal(m.AgentStarted):
		text = fmt.Sprintf("the agent on machine %s restarted; the machine did not reboot", m.ID)
	case away >= h.cfg.OfflineAfter:
		text = fmt.Sprintf("machine %s was cut off for %s and is back; it did not reboot, so its workloads kept running", m.ID, away.Round(time.Second))
	default:
		return nil
	}
	h.log.Info(text)
	ws, err := tx.Workloads(store.WorkloadFilter{Machine: m.ID})
	if err != nil {
		return err
	}
	for _, w := range ws {
		if err := h.timeline(tx, w.ID, text); err != nil {
			return err
		}
	}
	return nil
}

func sameReport(a, b protocol.Status) bool {
	return a.Attempt == b.Attempt && a.Mode == b.Mode && a.Code == b.Code && a.Detail == b.Detail &&
		(a.ExitCode == nil) == (b.ExitCode == nil) && (a.ExitCode == nil || *a.ExitCode == *b.ExitCode)
}

// acceptInventory stores inv on m if it fits the machine, and logs it if
// not: a lying inventory changes nothing.
func (h *Hub) acceptInventory(m *store.Machine, inv *protocol.Inventory) {
	if err := h.checkInventory(m, inv); err != nil {
		h.log.Warn("inventory rejected", "machine", m.ID, "err", err)
		return
	}
	if m.OS == "" {
		m.OS, m.Arch = inv.OS, inv.Arch
	}
	m.Inventory = inv
}

// Desired computes the machine's complete desired state from the store.
func (h *Hub) Desired(ctx context.Context, machineID string) (*protocol.SyncResponse, error) {
	var resp *protocol.SyncResponse
	err := h.store.View(ctx, func(tx store.Tx) error {
		m, err := tx.Machine(machineID)
		if err != nil {
			return err
		}
		if m.Revoked {
			// A poll woken by the revocation ends here.
			return ErrRevoked
		}
		// Every change to a machine's desired state bumps its generation
		// in the same transaction, so a state computed for this generation
		// is the state: a wake reads one row.
		if cached, ok := h.desired.Load(machineID); ok && cached.(*protocol.SyncResponse).Generation == m.Generation {
			copied := *cached.(*protocol.SyncResponse)
			resp = &copied
			return nil
		}
		resp, err = h.computeDesired(tx, m)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("desired state of %s: %w", machineID, err)
	}
	resp.HubTime = h.clk.Now()
	return resp, nil
}

// computeDesired builds machine m's desired state from the store and
// caches it under m's generation.
func (h *Hub) computeDesired(tx store.Tx, m store.Machine) (*protocol.SyncResponse, error) {
	resp := &protocol.SyncResponse{StoreID: h.store.ID(), Generation: m.Generation, Workloads: []protocol.DesiredWorkload{}}
	ws, err := tx.Workloads(store.WorkloadFilter{Machine: m.ID})
	if err != nil {
		return nil, err
	}
	classes, err := classMap(tx)
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		mode, listed := modeOf(w)
		if !listed {
			continue
		}
		// A class's size is read at each generation: editing a class
		// reaches placed workloads at their machine's next change.
		c := classes[w.Class]
		resp.Workloads = append(resp.Workloads, protocol.DesiredWorkload{
			ID: w.ID, Attempt: w.Attempt, Mode: mode, Kind: w.Kind, Driver: w.Driver,
			Isolation: h.drivers[w.Driver].Isolation, Image: w.Image,
			Resources: protocol.Resources{CPUs: c.CPUs, MemoryMB: c.MemoryMB, Devices: w.Devices},
		})
	}
	cached := *resp
	h.desired.Store(m.ID, &cached)
	return resp, nil
}

func classMap(tx store.Tx) (map[string]store.Class, error) {
	cs, err := tx.Classes()
	if err != nil {
		return nil, err
	}
	m := make(map[string]store.Class, len(cs))
	for _, c := range cs {
		m[c.Name] = c
	}
	return m, nil
}

// modeOf is ADR-0016's mapping of a workload's state to its mode on its
// machine. listed is false for a workload the machine no longer holds.
func modeOf(w store.Workload) (mode protocol.Mode, listed bool) {
	if w.Machine == "" {
		return "", false
	}
	switch w.State {
	case store.StateProvisioning, store.StateRunning:
		return protocol.ModeRun, true
	case store.StateDeleting:
		return protocol.ModeRemove, true
	}
	// pending, queued, stopping, stopped, failed: parked, keeping the disk,
	// except endpoints, which keep nothing.
	if w.Kind == protocol.KindEndpoint {
		return protocol.ModeRemove, true
	}
	return protocol.ModePark, true
}

// bound cuts reported text to n bytes of valid UTF-8 without control
// characters: it is stored for operators and never shown to users.
func bound(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	s = strings.ToValidUTF8(s, "")
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return -1
		}
		return r
	}, s)
}
