package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/trust"
	"einsora.dev/edge/internal/groupcommit"
	"einsora.dev/edge/protocol"
)

// record saves what the agent reported and returns the machine's current
// generation, and whether there is news for the controller: a changed
// status, or a machine back from silence. An unchanged report of a machine
// in touch costs the controller nothing. Reports arriving together are
// written in one transaction (group commit, see reports).
// capacity is set when the report changed what the machine offers (a new
// inventory accepted).
func (h *Hub) record(machineID string, req *protocol.SyncRequest) (gen int64, news, capacity bool, err error) {
	p := &report{machineID: machineID, req: req}
	h.reports.Do(p, h.commitReports)
	return p.gen, p.news, p.capacity, p.err
}

// reports batches the sync path's writes (groupcommit): the reports that
// arrive while one batch commits make up the next, so a thousand agents
// reporting at once (after a hub restart, say) cost a handful of
// transactions, not a thousand. A store whose transactions conflict the
// more rows they read (PostgreSQL, postgres.WriteBatch) is given batches of
// at most its Limit. A queued report is written even if its caller left.
type reports = groupcommit.Queue[*report]

type report struct {
	machineID string
	req       *protocol.SyncRequest
	// Set by the commit, before its caller returns.
	gen      int64
	news     bool
	capacity bool
	err      error
	// What the report was refused or cost: statuses dropped, stale
	// statuses deleted, timeline lines trimmed. Counted once committed.
	dropped, stale, trimmed int
}

// commitReports writes a batch in one transaction. A report refused on its
// own (an unknown or revoked machine) fails alone; a failing store fails
// the batch. A batch the store keeps rolling back for conflicts with other
// replicas' transactions is split in two, and each half committed on its
// own: a large transaction on PostgreSQL conflicts more the more rows it
// reads (its predicate locks grow from rows to pages to the table), and
// failing it would send every agent in it away.
func (h *Hub) commitReports(batch []*report) {
	if err := h.commitBatch(batch); errors.Is(err, store.ErrContended) && len(batch) > 1 {
		h.log.Warn("reports conflicted with other transactions past the store's retries; committing them in halves", "reports", len(batch), "err", err)
		h.commitReports(batch[:len(batch)/2])
		h.commitReports(batch[len(batch)/2:])
	}
}

// commitBatch writes batch in one transaction and sets each report's
// outcome; the store's error is returned as well.
func (h *Hub) commitBatch(batch []*report) error {
	now := h.clk.Now()
	// No caller's context: the batch is everyone's.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := h.store.Update(ctx, func(tx store.Tx) error {
		for _, p := range batch {
			p.gen, p.news, p.capacity, p.err = 0, false, false, nil
			if err := h.recordOne(tx, p, now); err != nil {
				if errors.Is(err, ErrUnknownMachine) || errors.Is(err, ErrRevoked) || errors.Is(err, ErrSimRefused) {
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
		} else {
			h.dropStatuses(p.machineID, p.dropped)
			h.dropped.stale.Add(int64(p.stale))
			h.dropped.trimmed.Add(int64(p.trimmed))
		}
	}
	return err
}

// recordOne writes one report within a batch's transaction. Only statuses
// of workloads placed on the machine are stored, and stored ones of
// workloads no longer placed there are deleted, so the machine's rows are
// bounded by what it holds, whatever it reports.
func (h *Hub) recordOne(tx store.Tx, p *report, now time.Time) error {
	p.dropped, p.stale, p.trimmed = 0, 0, 0
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
	if err := h.refuseSim(m, p.req.Inventory); err != nil {
		return err
	}
	p.gen = m.Generation
	p.news = h.presence.returning(m, now)
	was := m
	// Only the IDs: every sync of the machine, quiet ones too, passes
	// here, and decoding each workload's record was two fifths of a
	// report's allocations (issue 13).
	placed, err := tx.WorkloadIDs(p.machineID)
	if err != nil {
		return err
	}
	if p.trimmed, err = h.noteReturn(tx, m, p.req, now); err != nil {
		return err
	}
	m.LastSync = now
	m.ReportedGeneration = p.req.Generation
	m.AppliedGeneration = p.req.AppliedGeneration
	m.AgentVersion = trust.Text(p.req.AgentVersion, protocol.MaxVersionLen)
	if p.req.BootID != "" {
		m.BootID = trust.Text(p.req.BootID, protocol.MaxIDLength)
	}
	if !p.req.AgentStarted.IsZero() {
		m.AgentStarted = p.req.AgentStarted
	}
	if p.req.Inventory != nil {
		h.acceptInventory(&m, p.req.Inventory)
		p.capacity = m.Inventory != was.Inventory
	}
	if p.req.PreviousStoreID != "" {
		h.log.Warn("agent reports that it saw the store change and kept what it held",
			"machine", p.machineID, "previous_store", trust.Text(p.req.PreviousStoreID, protocol.MaxIDLength))
	}
	if quiet(was, m, p, now, 2*h.feed.every) {
		// Only its last sync moved: the presence batch writes it.
		h.feed.note(p.machineID, now)
	} else if err := tx.PutMachine(m); err != nil {
		return err
	}
	before, err := tx.Statuses(p.machineID)
	if err != nil {
		return err
	}
	here := make(map[string]bool, len(placed))
	for _, id := range placed {
		here[id] = true
	}
	since := make(map[string]store.StatusRecord, len(before))
	for _, s := range before {
		if !here[s.Workload] {
			if err := tx.DeleteStatus(p.machineID, s.Workload); err != nil {
				return err
			}
			p.stale++
			continue
		}
		since[s.Workload] = s
	}
	for _, s := range p.req.Statuses {
		if !here[s.Workload] {
			p.dropped++
			continue
		}
		s.Detail = trust.Text(s.Detail, protocol.MaxDetail)
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

// noteReturn writes on the timeline of a machine's workloads
// what happened while the hub did not hear from it: a reboot (its
// workloads' processes are gone), a restarted agent, or a partition (cut
// off, still running). The boot ID and the agent's start time in each sync
// tell them apart: a line is written once per change of either, never for
// a field merely missing, and repeated lines collapse (noteLine). It
// returns how many old timeline lines were trimmed.
func (h *Hub) noteReturn(tx store.Tx, m store.Machine, req *protocol.SyncRequest, now time.Time) (int, error) {
	if m.LastSync.IsZero() {
		return 0, nil
	}
	away := now.Sub(m.LastSync)
	// A partition is what this hub missed: its own downtime is none.
	missed := h.presence.missed(m.LastSync, now)
	var kind, text string
	switch {
	case m.BootID != "" && req.BootID != "" && m.BootID != trust.Text(req.BootID, protocol.MaxIDLength):
		kind = "rebooted"
		text = fmt.Sprintf("machine %s rebooted (last heard %s before); what ran there was restarted or is gone", m.ID, away.Round(time.Second))
	case !m.AgentStarted.IsZero() && !req.AgentStarted.IsZero() && !req.AgentStarted.Equal(m.AgentStarted):
		kind = "agent-restarted"
		text = fmt.Sprintf("the agent on machine %s restarted; the machine did not reboot", m.ID)
	case h.presence.cutOff(missed):
		kind = "cut-off"
		text = fmt.Sprintf("machine %s was cut off for %s and is back; it did not reboot, so its workloads kept running", m.ID, missed.Round(time.Second))
	default:
		return 0, nil
	}
	placed, err := tx.Workloads(store.WorkloadFilter{Machine: m.ID})
	if err != nil {
		return 0, err
	}
	trimmed, repeated, written, ended := 0, false, 0, 0
	for _, w := range placed {
		line := text
		if kind == "cut-off" {
			// "Kept running" holds only for what the machine still
			// runs: what was failed or stopped while it was away is
			// told so (its machine now parks or removes it), and what
			// had ended before says nothing (issue 18).
			switch mode, _ := modeOf(w); {
			case mode == protocol.ModeRun:
			case w.Since.After(m.LastSync):
				ended++
				line = fmt.Sprintf("machine %s was cut off for %s and is back; this workload became %s while it was away, so its machine is told to %s it",
					m.ID, missed.Round(time.Second), w.State, mode)
			default:
				continue
			}
		}
		n, collapsed, err := h.noteLine(tx, now, w.ID, kind, line)
		if err != nil {
			return 0, err
		}
		trimmed += n
		repeated = repeated || written == 0 && collapsed
		written++
	}
	if ended > 0 {
		text = fmt.Sprintf("machine %s was cut off for %s and is back; it did not reboot; %d of its workloads were failed or stopped while it was away, and it is told to stop them",
			m.ID, away.Round(time.Second), ended)
	}
	// A line that only adds to a count is no news for the operator's log.
	level := slog.LevelInfo
	if repeated {
		level = slog.LevelDebug
	}
	h.log.Log(context.Background(), level, text)
	return trimmed, nil
}

// quiet reports whether a sync changed nothing of machine m but its last
// sync, and that recently enough for the presence batch to carry it
// (within two batches: should batches fail, syncs write it again).
func quiet(before, after store.Machine, p *report, now time.Time, every time.Duration) bool {
	return !p.news && p.req.PreviousStoreID == "" && now.Sub(before.LastSync) < every &&
		before.ReportedGeneration == after.ReportedGeneration && before.AppliedGeneration == after.AppliedGeneration &&
		before.AgentVersion == after.AgentVersion && before.BootID == after.BootID &&
		before.AgentStarted.Equal(after.AgentStarted) && before.Inventory == after.Inventory
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
