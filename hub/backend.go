package hub

import (
	"fmt"
	"log/slog"
	"time"

	"einsora.dev/edge/hub/placement"
	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/protocol"
)

// Backend is the runtime-neutral seam between the controller and the
// runtime that runs what it places (ADR-0016). The controller decides,
// in the store, what each workload should be; a backend says what it can
// host and what it observed, and is told, after commit, what changed. The
// agent backend is the one there is; a region run by Kubernetes would be
// another, without touching placement or the controller's rules.
type Backend interface {
	// Capacity is what the runtime offers placement now, read in the
	// admit transaction so capacity is read and taken under one lock.
	// classes sizes what placed workloads hold.
	Capacity(tx store.Tx, classes map[string]store.Class) (Capacity, error)
	// Observe reports what the runtime says of the workloads on machine
	// machineID. ok is false when what it says may decide nothing now.
	Observe(tx store.Tx, machineID string) (obs Observation, ok bool, err error)
	// Run, Park and Delete tell the runtime, after the commit that changed
	// them, that these workloads are to run, to be parked keeping their
	// data, or to be removed with their data (or no longer listed).
	Run(refs ...Ref)
	Park(refs ...Ref)
	Delete(refs ...Ref)
	// Changed tells the runtime, after the commit, that these machines'
	// records or what is placed on them changed, so a view it keeps of
	// them reads them again. Safe from any goroutine.
	Changed(machineIDs ...string)
	// Placed tells the runtime, after the commit, that these workloads
	// were placed as they are given, on machines nothing else changed in
	// that transaction, to run: a view it keeps takes them without reading
	// their machines again. classes are the classes that transaction read.
	// Only the controller's passes call it.
	Placed(classes map[string]store.Class, ws ...store.Workload)
	// Prepare is called before each transaction that calls Capacity or
	// Check: the changes told before it are those that transaction reads
	// again, so it sees their commits whatever its isolation.
	Prepare()
	// Confirm checks m, machineID's record as the admit transaction
	// that is about to place on it read it (nil: it is gone): a change
	// committed just before that transaction began may not have been told
	// (Changed) yet, and placement must not act on a revoked machine or an
	// inventory that shrank. It returns errViewStale when the record
	// moved; the batch then commits nothing and is made again.
	Confirm(machineID string, m *store.Machine) error
	// Forget drops what the runtime keeps in memory of the store: the
	// next Capacity reads it whole (a new term, missed notifications).
	Forget()
	// Heard tells the runtime the region's last syncs as the sweep read
	// them, so a view that judges presence by the last syncs it keeps
	// sees what the presence batches wrote since. It returns how many
	// machines the list and the runtime's view disagree on (marked
	// changed, as Changed does): capacity may have grown.
	Heard(ls []store.LastSync) int
	// Observed tells the runtime the last syncs of machines whose reports
	// were just observed, as that transaction read them: a view that
	// judges presence by them sees those back online without reading
	// them again. Only the controller's passes call it.
	Observed(ls []store.LastSync)
	// Behind reports whether Capacity would have more to read than what
	// changed in one admit batch: the runtime has yet to settle, or a
	// view it keeps was never read or has changes waiting. Warm then does
	// that reading in tx, a read transaction outside admission.
	Behind() bool
	Warm(tx store.Tx, classes map[string]store.Class) error
	// Check reads in tx, the old way, what Capacity offers and compares
	// it with the view Capacity keeps, adopting the full read. It
	// returns what the view had wrong.
	Check(tx store.Tx, classes map[string]store.Class) ([]viewDiff, error)
}

// Ref names a placed workload on the machine that holds it.
type Ref struct {
	Workload string
	Machine  string
}

// Capacity is a backend's offer to placement.
type Capacity struct {
	// Fleet holds the machines placement may choose among, with what
	// placed workloads already hold on each, ready for a pass: what
	// earlier passes held but did not commit is dropped.
	Fleet *placement.Fleet
	// Settling is set right after a restart, until the runtime has heard
	// from what it expects: nothing is admitted meanwhile.
	Settling bool
}

// Observation is what a runtime reports of a machine's workloads.
type Observation struct {
	// Statuses holds the latest status of each workload reported.
	Statuses map[string]store.StatusRecord
	// applied is the generation of desired state the machine last applied.
	applied int64
	// lastSync is the machine's, as read with the statuses.
	lastSync time.Time
}

// Absent reports whether w is missing from a runtime that has applied the
// desired state listing it: it is run again, under the same attempt.
func (o Observation) Absent(w store.Workload) bool {
	_, ok := o.Statuses[w.ID]
	return !ok && o.applied >= w.ModeGeneration
}

// changes collects, in a transaction, what to tell the backend after
// commit.
type changes []change

type change struct {
	mode protocol.Mode
	ref  Ref
}

func (cs *changes) add(mode protocol.Mode, workload, machine string) {
	*cs = append(*cs, change{mode: mode, ref: Ref{Workload: workload, Machine: machine}})
}

// tell hands the changes of a committed transaction to b, by mode.
func tell(b Backend, cs changes) {
	var run, park, del []Ref
	for _, c := range cs {
		switch c.mode {
		case protocol.ModeRun:
			run = append(run, c.ref)
		case protocol.ModePark:
			park = append(park, c.ref)
		default:
			del = append(del, c.ref)
		}
	}
	if len(run) > 0 {
		b.Run(run...)
	}
	if len(park) > 0 {
		b.Park(park...)
	}
	if len(del) > 0 {
		b.Delete(del...)
	}
}

var _ Backend = (*agentBackend)(nil)

// agentBackend runs workloads on machines whose agents sync with the hub.
// Desired state is computed from the store at every sync (rule 1), so
// Run, Park and Delete only wake the machines' long polls, here and on the
// other replicas. Capacity is the registered machines with their checked
// inventories; Observe reads the statuses their agents reported.
type agentBackend struct {
	region   string
	log      *slog.Logger
	presence presence
	// wake wakes the machines' long polls, deduplicated, and marks them
	// changed in the view; wakePolls only wakes them.
	wake, wakePolls func(machineIDs []string)
	// derive caches the desired states of the machines placed on, so that
	// their wakes find them (Hub.derivePlaced).
	derive func(classes map[string]store.Class, placed []store.Workload)
	// settled is set, once and for good, when the machines expected have
	// synced (see settle). Only the controller's admit step touches it.
	settled bool
	// view is the region's capacity, kept up to date per change
	// (capview.go).
	view *capView
}

func (b *agentBackend) Run(refs ...Ref)       { b.wake(machinesOf(refs)) }
func (b *agentBackend) Park(refs ...Ref)      { b.wake(machinesOf(refs)) }
func (b *agentBackend) Delete(refs ...Ref)    { b.wake(machinesOf(refs)) }
func (b *agentBackend) Changed(ids ...string) { b.view.touch(ids...) }
func (b *agentBackend) Forget()               { b.view.forget() }
func (b *agentBackend) Prepare()              { b.view.prepare() }

// Placed takes the placements into the view, derives their machines'
// desired states, and wakes them.
func (b *agentBackend) Placed(classes map[string]store.Class, ws ...store.Workload) {
	b.view.placed(ws)
	b.derive(classes, ws)
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.Machine
	}
	b.wakePolls(ids)
}

func (b *agentBackend) Heard(ls []store.LastSync) int { return b.view.heard(ls) }
func (b *agentBackend) Observed(ls []store.LastSync)  { b.view.observed(ls) }

// Confirm checks machineID's record, as the admit transaction read it,
// against the view's, on what placement reads.
func (b *agentBackend) Confirm(machineID string, m *store.Machine) error {
	if m != nil && b.view.sameRecord(*m) {
		return nil
	}
	b.view.touch(machineID)
	return fmt.Errorf("machine %s: %w", machineID, errViewStale)
}

func (b *agentBackend) Check(tx store.Tx, classes map[string]store.Class) ([]viewDiff, error) {
	return b.view.check(tx, classes)
}

func refsOf(cs changes) []Ref {
	refs := make([]Ref, len(cs))
	for i, c := range cs {
		refs[i] = c.ref
	}
	return refs
}

func machinesOf(refs []Ref) []string {
	ids := make([]string, len(refs))
	for i, r := range refs {
		ids[i] = r.Machine
	}
	return ids
}

// Observe reads what machine machineID's agent reported. An offline
// machine's statuses decide nothing (rule 8), and another region's
// controller observes its own machines.
func (b *agentBackend) Observe(tx store.Tx, machineID string) (Observation, bool, error) {
	m, err := tx.Machine(machineID)
	if err != nil {
		return Observation{}, false, err
	}
	if m.Region != b.region || !b.presence.online(m) {
		return Observation{}, false, nil
	}
	statuses, err := tx.Statuses(machineID)
	if err != nil {
		return Observation{}, false, err
	}
	obs := Observation{Statuses: make(map[string]store.StatusRecord, len(statuses)), applied: m.AppliedGeneration, lastSync: m.LastSync}
	for _, s := range statuses {
		obs.Statuses[s.Workload] = s
	}
	return obs, true, nil
}

// Capacity offers placement the region's machines from the view, after
// re-reading in tx the machines that changed since it last read them:
// what a batch places is taken under the same transaction that read it,
// with no full read of the fleet. Until the fleet has settled, which
// reads every machine, nothing is offered.
func (b *agentBackend) Capacity(tx store.Tx, classes map[string]store.Class) (Capacity, error) {
	if !b.settled {
		ms, err := tx.Machines()
		if err != nil {
			return Capacity{}, err
		}
		if !b.settle(ms) {
			return Capacity{Settling: true}, nil
		}
	}
	if err := b.view.update(tx); err != nil {
		return Capacity{}, err
	}
	return Capacity{Fleet: b.view.offer(b.presence, classes)}, nil
}

func (b *agentBackend) Behind() bool { return !b.settled || b.view.behind() }

// Warm settles and brings the view and its fleet up to date, as the next
// Capacity would, so that admission after a quiet spell (a restart, a
// fleet connecting) is not the one to read the region.
func (b *agentBackend) Warm(tx store.Tx, classes map[string]store.Class) error {
	_, err := b.Capacity(tx, classes)
	return err
}

// settle reports whether the hub may admit. Right after it starts, it has
// not heard from the machines that were online before, and placing on what
// it happens to know would crowd the first machines back. So it waits until
// every machine that was online when the hub last heard from its fleet (the
// latest sync before this start stands for that moment, however long the
// hub was down), or that registered since, has synced again, or until
// OfflineAfter has passed.
func (b *agentBackend) settle(ms []store.Machine) bool {
	if b.settled {
		return true
	}
	var lastHeard time.Time
	for _, m := range ms {
		if m.LastSync.Before(b.presence.started) && m.LastSync.After(lastHeard) {
			lastHeard = m.LastSync
		}
	}
	waiting := 0
	for _, m := range ms {
		wasOnline := b.presence.wasOnline(m, lastHeard)
		registeredSince := !m.Registered.Before(b.presence.started)
		if m.Revoked || !wasOnline && !registeredSince {
			continue
		}
		if m.LastSync.Before(b.presence.started) || m.Inventory == nil {
			waiting++
		}
	}
	now := b.presence.clk.Now()
	if waiting > 0 && b.presence.justStarted() {
		b.log.Debug("settling: waiting for machines to reconnect before admitting", "machines", waiting)
		return false
	}
	b.settled = true
	b.log.Info("settled: admitting", "waited", now.Sub(b.presence.started), "missing", waiting)
	return true
}
