// Package store is the contract of the hub's store: the one place that owns
// intent (tenants, machines, classes, workloads, desired generations, the
// latest status of each workload, and the timeline). One test suite,
// storetest, runs over every implementation.
package store

import (
	"context"
	"errors"
	"time"

	"einsora.dev/edge/protocol"
)

// Errors every implementation returns, wrapped with context.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	// ErrContended is an Update the database kept rolling back for
	// conflicts with other transactions, past the implementation's
	// retries. A smaller transaction may go through where it did not.
	ErrContended = errors.New("store: gave up")
)

// Store is a transactional store. Every change that alters a machine's
// desired state is made in one Update together with the machine's new
// generation, so the two never disagree.
type Store interface {
	// ID is made once, when the store is created, and never changes: an
	// agent that sees it change knows the hub's database was replaced.
	ID() string
	// Update runs fn in a read-write transaction, committed when fn
	// returns nil. Implementations may retry fn on a serialisation
	// conflict, so fn must have no effect outside tx.
	Update(ctx context.Context, fn func(tx Tx) error) error
	// View runs fn in a read-only transaction.
	View(ctx context.Context, fn func(tx Tx) error) error
	Close() error
}

// Tx is what a transaction can read and write.
type Tx interface {
	CreateTenant(t Tenant) error
	Tenants() ([]Tenant, error)
	Tenant(name string) (Tenant, error)

	PutClass(c Class) error
	Classes() ([]Class, error)
	Class(name string) (Class, error)

	// PutMachine inserts or replaces the machine's record.
	PutMachine(m Machine) error
	Machine(id string) (Machine, error)
	// MachineRevoked reports whether machine id is revoked; ErrNotFound
	// if there is none. Every TLS handshake asks it, so it reads one
	// column, not the record (whose inventory takes decoding).
	MachineRevoked(id string) (bool, error)
	// MachineGeneration returns machine id's generation and whether it
	// is revoked; ErrNotFound if there is none. Every woken poll asks
	// it, so it reads two columns, not the record.
	MachineGeneration(id string) (generation int64, revoked bool, err error)
	Machines() ([]Machine, error)
	// LastSyncs returns the ID and last sync of every machine of region,
	// in ID order: what the sweep reads of a whole region every few
	// seconds, without decoding every record.
	LastSyncs(region string) ([]LastSync, error)
	// MachineStates returns every machine's ID, region, last sync and
	// revocation, in ID order: what counting the fleet by state needs (a
	// metrics scrape), without decoding every record.
	MachineStates() ([]MachineState, error)
	// MachinesAfter returns at most limit machines whose IDs sort after
	// after ("" for the first), in ID order: one page of the fleet.
	MachinesAfter(after string, limit int) ([]Machine, error)
	// DeleteMachine removes the machine, its statuses and its
	// certificates; ErrNotFound if there is none.
	DeleteMachine(id string) error
	// TouchMachines moves the last sync of the machines named forward to
	// at (never back), in one statement per few hundred: a replica's
	// presence batch.
	TouchMachines(ids []string, at time.Time) error
	// BumpGeneration increments the machine's desired generation and
	// returns the new value.
	BumpGeneration(machineID string) (int64, error)
	// BumpMachines adds each bump's count to its machine's desired
	// generation and returns the records of the machines bumped, as they
	// are after, in no set order; a machine not in the store is missing
	// from them. It is an admit batch's placements, several a statement:
	// the check of each machine placed on and the generations they set.
	BumpMachines(bumps []Bump) ([]Machine, error)

	// CreateWorkload inserts a new workload; ErrExists if its ID is taken.
	CreateWorkload(w Workload) error
	// PutWorkload replaces an existing workload's record.
	PutWorkload(w Workload) error
	// PutWorkloads replaces existing workloads' records, several a
	// statement; a workload named twice keeps its last record. ErrNotFound
	// if one is missing.
	PutWorkloads(ws []Workload) error
	Workload(id string) (Workload, error)
	// Workloads returns the workloads matching f, oldest first.
	Workloads(f WorkloadFilter) ([]Workload, error)
	// WorkloadIDs returns the IDs of the workloads on machineID, in ID
	// order: what recording each report of the machine needs of them,
	// without decoding every record.
	WorkloadIDs(machineID string) ([]string, error)
	// Listed returns the workloads on machineID with their classes'
	// sizes, oldest first, in one read: what the machine's desired state
	// lists of them.
	Listed(machineID string) ([]Listed, error)
	DeleteWorkload(id string) error

	// PutStatus records the latest status a machine reported for a
	// workload, replacing the one before.
	PutStatus(s StatusRecord) error
	// Statuses returns the latest statuses machineID reported.
	Statuses(machineID string) ([]StatusRecord, error)
	// DeleteStatus forgets machineID's status of workloadID; deleting one
	// that is not there is no error.
	DeleteStatus(machineID, workloadID string) error

	// AddTimeline adds lines to their workloads' timelines. A store may
	// write them later in the transaction, together, but always before
	// its timeline is read or changed and before the commit.
	AddTimeline(es ...TimelineEntry) error
	// Timeline returns a workload's lines, oldest first.
	Timeline(workloadID string) ([]TimelineEntry, error)
	// LastTimeline returns a workload's newest line; ErrNotFound if it
	// has none.
	LastTimeline(workloadID string) (TimelineEntry, error)
	// ReplaceLastTimeline replaces the newest line of e.Workload with e.
	ReplaceLastTimeline(e TimelineEntry) error
	// TrimTimeline keeps a workload's newest keep lines. When it drops
	// any, the oldest line kept is replaced by note, so the timeline says
	// at its top that it lost lines. It returns how many it dropped.
	TrimTimeline(workloadID string, keep int, note string) (int, error)
	// LongTimelines returns the workloads whose timelines hold more than
	// keep lines, at most limit of them.
	LongTimelines(keep, limit int) ([]string, error)
	// DeleteRemovedTimelines deletes the lines of every workload no longer
	// in the store whose newest line is older than before, and returns how
	// many lines went.
	DeleteRemovedTimelines(before time.Time) (int, error)

	// PutCertificate inserts or replaces the certificate of c.Serial.
	PutCertificate(c Certificate) error
	// Certificate returns the certificate of serial; ErrNotFound if the
	// hub never issued it (or forgot it).
	Certificate(serial string) (Certificate, error)
	// Certificates returns machineID's certificates, oldest first.
	Certificates(machineID string) ([]Certificate, error)
	// PruneCertificates deletes machineID's certificates that expired
	// before now, then all but its newest keep, and returns how many went.
	PruneCertificates(machineID string, now time.Time, keep int) (int, error)

	// CreateToken stores an enrolment token by its hash.
	CreateToken(t Token) error
	// Tokens returns the newest limit tokens, newest first.
	Tokens(limit int) ([]Token, error)
	// UseToken marks the token with this hash used and returns it. It
	// returns ErrNotFound for an unknown hash and ErrUsed for a token used
	// before; expiry is the caller's to check.
	UseToken(hash string, at time.Time) (Token, error)

	// Lease returns the named lease; ErrNotFound if it was never taken.
	Lease(name string) (Lease, error)
	// PutLease writes the named lease.
	PutLease(l Lease) error

	// PutReplica records that the replica at r.URL was seen at r.Seen
	// holding r.Polls polls, adding it or moving its time and count.
	PutReplica(r Replica) error
	// Replicas returns at most limit replicas seen at or after since, in
	// URL order.
	Replicas(since time.Time, limit int) ([]Replica, error)
	// PruneReplicas deletes the replicas last seen before before and
	// returns how many went.
	PruneReplicas(before time.Time) (int, error)
}

// Replica is a hub replica that publishes its agents' URL (hub.Config.URL),
// when it last said it was alive, and how many polls it held then.
type Replica struct {
	URL  string
	Seen time.Time
	// Polls is how many agents' polls the replica held at Seen; -1 for
	// a replica that does not say (a hub older than the count), which
	// no replica sends agents to for its share.
	Polls int
}

// ErrUsed is returned for a single-use token used before.
var ErrUsed = errors.New("already used")

// Token is an enrolment token, stored by the hash of its secret. It fixes
// the owner and region of the machine that enrols with it.
type Token struct {
	Hash    string
	Owner   string
	Region  string
	Created time.Time
	Expires time.Time
	Used    time.Time
}

// Lease is a named lease, e.g. controller:<region>. Epoch grows each time
// another holder takes it; writes fenced by a lease check the epoch.
type Lease struct {
	Name    string
	Holder  string
	Epoch   int64
	Expires time.Time
}

// Tenant owns machines and workloads.
type Tenant struct {
	Name    string
	Created time.Time
}

// Listed is what a machine's desired state reads of a workload on it: a
// few of its record's fields, and its class's size (zero where the class
// is gone). Created and Class are what a later state derived from this
// one needs: where the workload sorts, and what sizes it then.
type Listed struct {
	ID       string
	Kind     protocol.Kind
	State    State
	Driver   string
	Image    string
	Devices  []string
	Attempt  int64
	Spec     protocol.WorkloadSpec
	Class    string
	Created  time.Time
	CPUs     int
	MemoryMB int
}

// Class is a size of workload: what it reserves on a machine.
type Class struct {
	Name string
	// Accelerator is "none", "apple-gpu", "nvidia-gpu" or "amd-gpu".
	Accelerator string
	Devices     int
	CPUs        int
	MemoryMB    int
}

// Bump is how much to add to a machine's desired generation.
type Bump struct {
	Machine string
	By      int64
}

// LastSync is a machine's ID with when it last synced.
type LastSync struct {
	Machine string
	At      time.Time
}

// MachineState is a machine as counting the fleet sees it.
type MachineState struct {
	Machine  string
	Region   string
	LastSync time.Time
	Revoked  bool
}

// Machine is a registered machine. Owner and Region come from its
// registration (enrolment), never from what it reports.
type Machine struct {
	ID     string
	Name   string
	Owner  string
	Region string
	// OS and Arch are fixed by the first inventory the hub accepted.
	OS   string
	Arch string
	// Generation is the machine's desired generation.
	Generation int64
	// ReportedGeneration is the desired generation the agent last said it
	// received; AppliedGeneration the one it last applied.
	ReportedGeneration int64
	AppliedGeneration  int64
	LastSync           time.Time
	AgentVersion       string
	BootID             string
	AgentStarted       time.Time
	// Inventory is the last validated inventory; nil before the first.
	Inventory   *protocol.Inventory
	Registered  time.Time
	Revoked     bool
	CertExpires time.Time
	// RevokedAt is when an operator revoked the machine; zero if not.
	RevokedAt time.Time
}

// State is a workload's state in the store.
type State string

const (
	StatePending      State = "pending"
	StateQueued       State = "queued"
	StateProvisioning State = "provisioning"
	StateRunning      State = "running"
	StateStopping     State = "stopping"
	StateStopped      State = "stopped"
	StateFailed       State = "failed"
	StateDeleting     State = "deleting"
)

// States lists every state.
var States = []State{StatePending, StateQueued, StateProvisioning, StateRunning,
	StateStopping, StateStopped, StateFailed, StateDeleting}

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	for _, k := range States {
		if s == k {
			return true
		}
	}
	return false
}

// Workload is a user's intent and where it was placed.
type Workload struct {
	ID     string
	Name   string
	Tenant string
	Kind   protocol.Kind
	Class  string
	Region string
	Image  string
	// Spec is what the workload runs beyond its image. Its SecretEnv
	// values are sealed by the hub (hub/secrets.go) before they reach the
	// store: the store never holds a secret in clear.
	Spec  protocol.WorkloadSpec
	State State
	// Machine and Driver are where it was placed. They stay set while the
	// workload is parked, because the machine holds its data.
	Machine string
	Driver  string
	Devices []string
	// Attempt counts admissions; each is a new attempt.
	Attempt int64
	// ModeGeneration is the machine generation at which the workload's
	// mode last changed. A status from an older generation answers
	// nothing.
	ModeGeneration int64
	// Reason says why it is in its state, in words a user understands.
	Reason  string
	Created time.Time
	// Since is when it entered its state.
	Since time.Time
	// Progress is when the agent last reported progress on it.
	Progress time.Time
	// Restarts counts the local restarts of this attempt already on the
	// timeline; a new attempt starts it at 0.
	Restarts int
}

// WorkloadFilter selects workloads; zero fields match everything.
type WorkloadFilter struct {
	Machine string
	States  []State
	Region  string
	// After pages through the workloads in their order (created, then
	// ID): when AfterID is set, only those after (AfterCreated, AfterID)
	// match.
	AfterCreated time.Time
	AfterID      string
	// Limit, when positive, returns at most this many.
	Limit int
}

// StatusRecord is the latest status one machine reported for one workload.
type StatusRecord struct {
	Machine string
	protocol.Status
	At time.Time
}

// TimelineEntry is one line of a workload's history.
type TimelineEntry struct {
	Workload string
	At       time.Time
	Text     string
	// Kind names lines that may collapse into one ("rebooted"); empty
	// for lines that never do.
	Kind string
	// Count is how many lines of Kind this one stands for, the first
	// written at First and the last at At. Zero reads as one.
	Count int
	First time.Time
}

// Certificate is a client certificate the hub issued to a machine.
type Certificate struct {
	// Serial is the certificate's serial number in lowercase hex.
	Serial  string
	Machine string
	Issued  time.Time
	Expires time.Time
	// Revoked is when an operator revoked it; zero while it is not.
	Revoked time.Time
}

// Live reports whether c is neither expired nor revoked at now.
func (c Certificate) Live(now time.Time) bool {
	return c.Revoked.IsZero() && now.Before(c.Expires)
}
