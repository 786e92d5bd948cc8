// Package sqlstore implements the store over database/sql. The SQL is
// written once, with ? placeholders, and rebound for each dialect, so the
// SQLite and PostgreSQL stores share every query and every test.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/internal/groupcommit"
	"einsora.dev/edge/protocol"
)

// Dialect is what differs between databases.
type Dialect struct {
	Name string
	// Dollar: placeholders are $1, $2, … rather than ?.
	Dollar bool
	// IsConflict reports whether err is a unique-constraint violation.
	IsConflict func(err error) bool
	// IsRetryable reports whether err means the database rolled the
	// transaction back for a serialisation failure or a deadlock, so that
	// running it again may succeed. Nil: Update never retries.
	IsRetryable func(err error) bool
	// UpdateIsolation and ViewIsolation are the isolation levels of
	// Update's and View's transactions; zero is the driver's default.
	UpdateIsolation, ViewIsolation sql.IsolationLevel
	// Collate follows every ORDER BY on text, so that each dialect sorts
	// by bytes as SQLite does by default (PostgreSQL: ` COLLATE "C"`).
	Collate string
	// PrepareOnce keeps statements prepared across transactions
	// (stmtCache), as written: only for ? placeholders. pgx caches its
	// own, so PostgreSQL leaves it off.
	PrepareOnce bool
	// StatementsRunOut: a statement, once begun, runs to its end, and
	// the transaction's context is checked before each statement
	// instead. modernc.org/sqlite watched each statement's context with
	// a goroutine, a channel and a lock of its own, to interrupt
	// statements that on a local file end in microseconds. PostgreSQL's
	// statements wait on a network, so it leaves it off.
	StatementsRunOut bool
	// GroupCommit: the Updates that arrive while one commits share the
	// next transaction, each in a savepoint of its own (grouped). For a
	// database with one writer; one whose transactions are retried
	// (IsRetryable) must leave it off, since a retry would run the
	// others' functions again.
	GroupCommit bool
}

// SQLite is the dialect of modernc.org/sqlite.
var SQLite = Dialect{
	Name:             "sqlite",
	PrepareOnce:      true,
	StatementsRunOut: true,
	GroupCommit:      true,
	IsConflict: func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
	},
}

// Store is the shared implementation.
type Store struct {
	writer, reader *sql.DB
	d              Dialect
	id             string
	// stmts are the statements kept prepared, per pool.
	stmts map[*sql.DB]*stmtCache
	// committed, when set, is called after each commit of an Update.
	committed func()
	// group gathers Updates into shared transactions; nil unless the
	// dialect's GroupCommit.
	group *groupcommit.Queue[*update]
}

// New brings the schema up to date and loads (or makes) the store ID.
func New(ctx context.Context, writer, reader *sql.DB, d Dialect, newID func() string) (*Store, error) {
	if d.GroupCommit && d.IsRetryable != nil {
		return nil, fmt.Errorf("sqlstore: dialect %s both groups commits and retries them: a retry would run the group's other functions again", d.Name)
	}
	s := &Store{writer: writer, reader: reader, d: d, stmts: map[*sql.DB]*stmtCache{}}
	if d.GroupCommit {
		s.group = &groupcommit.Queue[*update]{Limit: maxGroup}
	}
	if d.PrepareOnce {
		s.stmts[writer] = newStmtCache()
		s.stmts[reader] = newStmtCache()
	}
	if err := s.migrate(ctx); err != nil {
		return nil, err
	}
	// Two replicas starting on a new database race to make the ID: the
	// first insert wins and both read back the same one.
	if _, err := s.writer.ExecContext(ctx, s.q(`INSERT INTO meta (key, value) VALUES ('store_id', ?)
		ON CONFLICT (key) DO NOTHING`), newID()); err != nil {
		return nil, fmt.Errorf("save store id: %w", err)
	}
	if err := s.writer.QueryRowContext(ctx, s.q(`SELECT value FROM meta WHERE key = 'store_id'`)).Scan(&s.id); err != nil {
		return nil, fmt.Errorf("read store id: %w", err)
	}
	return s, nil
}

func (s *Store) ID() string { return s.id }

// OnCommit sets f to be called after each Update's commit, before the
// store is used: the SQLite store's checkpointer learns of it so.
func (s *Store) OnCommit(f func()) { s.committed = f }

// q rebinds a query written with ? to the dialect's placeholders.
func (s *Store) q(query string) string {
	if !s.d.Dollar {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Retries of an Update the database rolled back for a serialisation
// failure: at most MaxAttempts runs of fn, each after a pause drawn from
// [0, min(retryCap, retryBase × 2^retry)] so contenders fall out of step.
const (
	MaxAttempts = 20
	retryBase   = time.Millisecond
	retryCap    = 50 * time.Millisecond
)

// Update runs fn in a read-write transaction at the dialect's
// UpdateIsolation. When the database rolls it back for a serialisation
// failure or a deadlock (Dialect.IsRetryable), fn runs again in a new
// transaction, up to MaxAttempts times. Where the dialect groups commits,
// fn may share its transaction with other Updates: its writes are undone
// alone when it fails, but a failed commit fails them all, and once fn's
// last statement has run its context's end no longer undoes it.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	if s.group != nil {
		return s.grouped(ctx, fn)
	}
	opts := &sql.TxOptions{Isolation: s.d.UpdateIsolation}
	for attempt := 1; ; attempt++ {
		retry, err := s.run(ctx, s.writer, opts, false, fn)
		if err == nil || !retry {
			return err
		}
		if attempt == MaxAttempts {
			return fmt.Errorf("%w after %d conflicting attempts: %w", store.ErrContended, attempt, err)
		}
		pause := time.Duration(rand.Int64N(int64(min(retryCap, retryBase<<(attempt-1))) + 1))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

// View runs fn in a read-only transaction at the dialect's ViewIsolation.
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	_, err := s.run(ctx, s.reader, &sql.TxOptions{Isolation: s.d.ViewIsolation, ReadOnly: s.d.Dollar}, true, fn)
	return err
}

// run runs fn in one transaction. retry reports that the transaction
// failed in a way the dialect says another attempt may cure; it looks at
// every statement's error, not only fn's, since fn may wrap or replace
// the error it got.
func (s *Store) run(ctx context.Context, db *sql.DB, opts *sql.TxOptions, readOnly bool, fn func(store.Tx) error) (retry bool, err error) {
	stmts := s.stmts[db]
	// Before the transaction holds a connection: the writer pool has
	// one, and preparing on the pool would wait for it.
	stmts.preparePending(ctx, db)
	sqlTx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return s.retryable(err), fmt.Errorf("store: begin: %w", err)
	}
	t := &tx{s: s, tx: sqlTx, ctx: ctx, stmtCtx: ctx, readOnly: readOnly, stmts: stmts}
	if s.d.StatementsRunOut {
		t.stmtCtx = context.WithoutCancel(ctx)
	}
	if err := fn(t); err != nil {
		sqlTx.Rollback()
		return t.retry || s.retryable(err), err
	}
	if err := t.writeLines(); err != nil {
		sqlTx.Rollback()
		return t.retry || s.retryable(err), err
	}
	if err := sqlTx.Commit(); err != nil {
		return s.retryable(err), fmt.Errorf("store: commit: %w", err)
	}
	if !readOnly && s.committed != nil {
		s.committed()
	}
	return false, nil
}

func (s *Store) retryable(err error) bool {
	return err != nil && s.d.IsRetryable != nil && s.d.IsRetryable(err)
}

type tx struct {
	s   *Store
	tx  *sql.Tx
	ctx context.Context
	// stmtCtx is what each statement runs under: ctx, or ctx without its
	// end where the dialect's statements run out (checked before each).
	stmtCtx context.Context
	// readOnly: the transaction is a View's.
	readOnly bool
	// retry is set once a statement failed with a retryable error.
	retry bool
	// stmts are its pool's prepared statements; nil when none are kept.
	stmts *stmtCache
	// bound are the statements of stmts bound to this transaction:
	// binding one (sql.Tx.StmtContext) allocates a statement the
	// transaction keeps until its end, and a batch runs the same few
	// statements hundreds of times.
	bound []boundStmt
	// lines are the timeline lines added and not yet written: they are
	// written together, before commit or before the timeline is read.
	lines []store.TimelineEntry
}

// seen notes a statement's error and returns it.
func (t *tx) seen(err error) error {
	if t.s.retryable(err) {
		t.retry = true
	}
	return err
}

func (t *tx) exec(query string, args ...any) (sql.Result, error) {
	if err := t.ended(); err != nil {
		return nil, err
	}
	if st := t.prepared(query); st != nil {
		res, err := st.ExecContext(t.stmtCtx, args...)
		return res, t.seen(err)
	}
	res, err := t.tx.ExecContext(t.stmtCtx, t.s.q(query), args...)
	return res, t.seen(err)
}

func (t *tx) query(query string, args ...any) (*sql.Rows, error) {
	if err := t.ended(); err != nil {
		return nil, err
	}
	if st := t.prepared(query); st != nil {
		rows, err := st.QueryContext(t.stmtCtx, args...)
		return rows, t.seen(err)
	}
	rows, err := t.tx.QueryContext(t.stmtCtx, t.s.q(query), args...)
	return rows, t.seen(err)
}

func (t *tx) queryRow(query string, args ...any) row {
	if err := t.ended(); err != nil {
		return row{t: t, err: err}
	}
	if st := t.prepared(query); st != nil {
		return row{r: st.QueryRowContext(t.stmtCtx, args...), t: t}
	}
	return row{r: t.tx.QueryRowContext(t.stmtCtx, t.s.q(query), args...), t: t}
}

// ended is the transaction's context's error, before a statement that
// its end would not interrupt (Dialect.StatementsRunOut).
func (t *tx) ended() error {
	if err := t.ctx.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// boundStmt is a pool's statement and the same bound to a transaction.
type boundStmt struct{ pool, tx *sql.Stmt }

// prepared is query's kept statement bound to the transaction, or nil
// when it has none yet (it is then prepared before a later transaction).
func (t *tx) prepared(query string) *sql.Stmt {
	if t.stmts == nil {
		return nil
	}
	st := t.stmts.get(query)
	if st == nil {
		return nil
	}
	// A transaction runs a few statements: a scan finds one sooner
	// than a map is made.
	for _, b := range t.bound {
		if b.pool == st {
			return b.tx
		}
	}
	// Prepared on this transaction's connection once, then reused.
	b := t.tx.StmtContext(t.stmtCtx, st)
	t.bound = append(t.bound, boundStmt{st, b})
	return b
}

// row is a *sql.Row whose Scan error the transaction notes.
type row struct {
	r *sql.Row
	t *tx
	// err is the error that kept the statement from running.
	err error
}

func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return r.t.seen(r.r.Scan(dest...))
}

// Times are stored as Unix nanoseconds, which every dialect keeps exactly.
func ts(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromTS(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func notFound(what, id string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s %q: %w", what, id, store.ErrNotFound)
	}
	return fmt.Errorf("%s %q: %w", what, id, err)
}

func (t *tx) CreateTenant(tn store.Tenant) error {
	_, err := t.exec(`INSERT INTO tenants (name, created) VALUES (?, ?)`, tn.Name, ts(tn.Created))
	if t.s.d.IsConflict(err) {
		return fmt.Errorf("tenant %q: %w", tn.Name, store.ErrExists)
	}
	return err
}

func (t *tx) Tenants() ([]store.Tenant, error) {
	rows, err := t.query(`SELECT name, created FROM tenants ORDER BY name` + t.s.d.Collate)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Tenant
	for rows.Next() {
		var tn store.Tenant
		var created int64
		if err := rows.Scan(&tn.Name, &created); err != nil {
			return nil, err
		}
		tn.Created = fromTS(created)
		out = append(out, tn)
	}
	return out, t.seen(rows.Err())
}

func (t *tx) Tenant(name string) (store.Tenant, error) {
	var tn store.Tenant
	var created int64
	err := t.queryRow(`SELECT name, created FROM tenants WHERE name = ?`, name).Scan(&tn.Name, &created)
	if err != nil {
		return tn, notFound("tenant", name, err)
	}
	tn.Created = fromTS(created)
	return tn, nil
}

func (t *tx) PutClass(c store.Class) error {
	_, err := t.exec(`INSERT INTO classes (name, accelerator, devices, cpus, memory_mb) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET accelerator = excluded.accelerator, devices = excluded.devices,
		cpus = excluded.cpus, memory_mb = excluded.memory_mb`,
		c.Name, c.Accelerator, c.Devices, c.CPUs, c.MemoryMB)
	return err
}

const classCols = `name, accelerator, devices, cpus, memory_mb`

func scanClass(sc interface{ Scan(...any) error }) (store.Class, error) {
	var c store.Class
	err := sc.Scan(&c.Name, &c.Accelerator, &c.Devices, &c.CPUs, &c.MemoryMB)
	return c, err
}

func (t *tx) Classes() ([]store.Class, error) {
	rows, err := t.query(`SELECT ` + classCols + ` FROM classes ORDER BY name` + t.s.d.Collate)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Class
	for rows.Next() {
		c, err := scanClass(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, t.seen(rows.Err())
}

func (t *tx) Class(name string) (store.Class, error) {
	c, err := scanClass(t.queryRow(`SELECT `+classCols+` FROM classes WHERE name = ?`, name))
	if err != nil {
		return c, notFound("class", name, err)
	}
	return c, nil
}

const machineCols = `id, name, owner, region, os, arch, generation, reported_generation, applied_generation,
	last_sync, agent_version, boot_id, agent_started, inventory, registered, revoked, cert_expires, revoked_at`

func (t *tx) TouchMachines(ids []string, at time.Time) error {
	for chunk := range slices.Chunk(ids, 500) {
		args := []any{ts(at), ts(at)}
		for _, id := range chunk {
			args = append(args, id)
		}
		_, err := t.exec(`UPDATE machines SET last_sync = ? WHERE last_sync < ? AND id IN (?`+strings.Repeat(`, ?`, len(chunk)-1)+`)`, args...)
		if err != nil {
			return fmt.Errorf("touch %d machines: %w", len(chunk), err)
		}
	}
	return nil
}

func (t *tx) PutMachine(m store.Machine) error {
	var inv []byte
	if m.Inventory != nil {
		var err error
		if inv, err = json.Marshal(m.Inventory); err != nil {
			return fmt.Errorf("machine %q: encode inventory: %w", m.ID, err)
		}
	}
	_, err := t.exec(`INSERT INTO machines (`+machineCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name, owner = excluded.owner, region = excluded.region,
		os = excluded.os, arch = excluded.arch, generation = excluded.generation,
		reported_generation = excluded.reported_generation, applied_generation = excluded.applied_generation,
		last_sync = excluded.last_sync, agent_version = excluded.agent_version, boot_id = excluded.boot_id,
		agent_started = excluded.agent_started, inventory = excluded.inventory, registered = excluded.registered,
		revoked = excluded.revoked, cert_expires = excluded.cert_expires, revoked_at = excluded.revoked_at`,
		m.ID, m.Name, m.Owner, m.Region, m.OS, m.Arch, m.Generation, m.ReportedGeneration, m.AppliedGeneration,
		ts(m.LastSync), m.AgentVersion, m.BootID, ts(m.AgentStarted), string(inv), ts(m.Registered), m.Revoked, ts(m.CertExpires), ts(m.RevokedAt))
	if err != nil {
		return fmt.Errorf("machine %q: %w", m.ID, err)
	}
	return nil
}

func scanMachine(sc interface{ Scan(...any) error }) (store.Machine, error) {
	var m store.Machine
	var lastSync, started, registered, certExpires, revokedAt int64
	var inv string
	err := sc.Scan(&m.ID, &m.Name, &m.Owner, &m.Region, &m.OS, &m.Arch, &m.Generation, &m.ReportedGeneration,
		&m.AppliedGeneration, &lastSync, &m.AgentVersion, &m.BootID, &started, &inv, &registered, &m.Revoked, &certExpires, &revokedAt)
	if err != nil {
		return m, err
	}
	m.LastSync, m.AgentStarted, m.Registered, m.CertExpires = fromTS(lastSync), fromTS(started), fromTS(registered), fromTS(certExpires)
	m.RevokedAt = fromTS(revokedAt)
	if inv != "" {
		m.Inventory = new(protocol.Inventory)
		if err := json.Unmarshal([]byte(inv), m.Inventory); err != nil {
			return m, fmt.Errorf("machine %q: decode inventory: %w", m.ID, err)
		}
	}
	return m, nil
}

func (t *tx) Machine(id string) (store.Machine, error) {
	m, err := scanMachine(t.queryRow(`SELECT `+machineCols+` FROM machines WHERE id = ?`, id))
	if err != nil {
		return m, notFound("machine", id, err)
	}
	return m, nil
}

func (t *tx) MachineRevoked(id string) (bool, error) {
	var revoked bool
	if err := t.queryRow(`SELECT revoked FROM machines WHERE id = ?`, id).Scan(&revoked); err != nil {
		return false, notFound("machine", id, err)
	}
	return revoked, nil
}

func (t *tx) MachineGeneration(id string) (int64, bool, error) {
	var gen int64
	var revoked bool
	if err := t.queryRow(`SELECT generation, revoked FROM machines WHERE id = ?`, id).Scan(&gen, &revoked); err != nil {
		return 0, false, notFound("machine", id, err)
	}
	return gen, revoked, nil
}

func (t *tx) Machines() ([]store.Machine, error) {
	return t.machines(t.query(`SELECT ` + machineCols + ` FROM machines ORDER BY id` + t.s.d.Collate))
}

func (t *tx) LastSyncs(region string) ([]store.LastSync, error) {
	rows, err := t.query(`SELECT id, last_sync FROM machines WHERE region = ? ORDER BY id`+t.s.d.Collate, region)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.LastSync
	for rows.Next() {
		var l store.LastSync
		var at int64
		if err := rows.Scan(&l.Machine, &at); err != nil {
			return nil, t.seen(err)
		}
		l.At = fromTS(at)
		out = append(out, l)
	}
	return out, t.seen(rows.Err())
}

func (t *tx) MachineStates() ([]store.MachineState, error) {
	rows, err := t.query(`SELECT id, region, last_sync, revoked FROM machines ORDER BY id` + t.s.d.Collate)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.MachineState
	for rows.Next() {
		var m store.MachineState
		var at int64
		if err := rows.Scan(&m.Machine, &m.Region, &at, &m.Revoked); err != nil {
			return nil, t.seen(err)
		}
		m.LastSync = fromTS(at)
		out = append(out, m)
	}
	return out, t.seen(rows.Err())
}

func (t *tx) MachinesAfter(after string, limit int) ([]store.Machine, error) {
	if limit <= 0 {
		return nil, nil
	}
	c := t.s.d.Collate
	return t.machines(t.query(`SELECT `+machineCols+` FROM machines WHERE id`+c+` > ? ORDER BY id`+c+` LIMIT ?`, after, limit))
}

func (t *tx) machines(rows *sql.Rows, err error) ([]store.Machine, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Machine
	for rows.Next() {
		m, err := scanMachine(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, t.seen(rows.Err())
}

func (t *tx) DeleteMachine(id string) error {
	for _, q := range []string{`DELETE FROM statuses WHERE machine = ?`, `DELETE FROM certificates WHERE machine = ?`} {
		if _, err := t.exec(q, id); err != nil {
			return fmt.Errorf("machine %q: %w", id, err)
		}
	}
	res, err := t.exec(`DELETE FROM machines WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("machine %q: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("machine %q: %w", id, store.ErrNotFound)
	}
	return nil
}

func (t *tx) BumpGeneration(machineID string) (int64, error) {
	if err := t.refuseBump(machineID); err != nil {
		return 0, err
	}
	var gen int64
	err := t.queryRow(`UPDATE machines SET generation = generation + 1 WHERE id = ? RETURNING generation`, machineID).Scan(&gen)
	if err != nil {
		return 0, notFound("machine", machineID, err)
	}
	return gen, nil
}

func (t *tx) BumpMachines(bumps []store.Bump) ([]store.Machine, error) {
	if t.readOnly {
		return nil, fmt.Errorf("bump the generations of %d machines in a read-only transaction", len(bumps))
	}
	by := make(map[string]int64, len(bumps))
	var ids []string
	for _, b := range bumps {
		if _, ok := by[b.Machine]; !ok {
			ids = append(ids, b.Machine)
		}
		by[b.Machine] += b.By
	}
	out := make([]store.Machine, 0, len(ids))
	for len(ids) > 0 {
		n := rowsInNextStatement(len(ids))
		args := make([]any, 0, 2*n)
		for _, id := range ids[:n] {
			args = append(args, id, by[id])
		}
		rows, err := t.query(bumpMachinesQueries[n], args...)
		if err != nil {
			return nil, fmt.Errorf("bump the generations of %d machines: %w", n, err)
		}
		for rows.Next() {
			m, err := scanMachine(rows)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("bump the generations of %d machines: %w", n, err)
			}
			out = append(out, m)
		}
		if err := t.seen(rows.Err()); err != nil {
			return nil, fmt.Errorf("bump the generations of %d machines: %w", n, err)
		}
		ids = ids[n:]
	}
	return out, nil
}

// refuseBump refuses a bump in a read-only transaction. PostgreSQL
// refuses an UPDATE there even when it would match no row; a read still
// tells a missing machine, as on SQLite.
func (t *tx) refuseBump(machineID string) error {
	if !t.readOnly {
		return nil
	}
	var one int
	if err := t.queryRow(`SELECT 1 FROM machines WHERE id = ?`, machineID).Scan(&one); err != nil {
		return notFound("machine", machineID, err)
	}
	return fmt.Errorf("machine %q: bump generation in a read-only transaction", machineID)
}

const workloadCols = `id, name, tenant, kind, class, region, image, state, machine, driver, devices, attempt,
	mode_generation, reason, created, since, progress, spec, restarts`

func workloadArgs(w store.Workload) []any {
	devices, _ := json.Marshal(w.Devices)
	return []any{w.ID, w.Name, w.Tenant, string(w.Kind), w.Class, w.Region, w.Image, string(w.State), w.Machine,
		w.Driver, string(devices), w.Attempt, w.ModeGeneration, w.Reason, ts(w.Created), ts(w.Since), ts(w.Progress),
		specColumn(w.Spec), w.Restarts}
}

func scanWorkload(sc interface{ Scan(...any) error }) (store.Workload, error) {
	var w store.Workload
	var kind, state, devices, spec string
	var created, since, progress int64
	err := sc.Scan(&w.ID, &w.Name, &w.Tenant, &kind, &w.Class, &w.Region, &w.Image, &state, &w.Machine, &w.Driver,
		&devices, &w.Attempt, &w.ModeGeneration, &w.Reason, &created, &since, &progress, &spec, &w.Restarts)
	if err != nil {
		return w, err
	}
	w.Kind, w.State = protocol.Kind(kind), store.State(state)
	w.Created, w.Since, w.Progress = fromTS(created), fromTS(since), fromTS(progress)
	if w.Devices, err = readDevicesColumn(devices); err != nil {
		return w, fmt.Errorf("workload %q: %w", w.ID, err)
	}
	if w.Spec, err = readSpecColumn(spec); err != nil {
		return w, fmt.Errorf("workload %q: %w", w.ID, err)
	}
	return w, nil
}

func readDevicesColumn(col string) ([]string, error) {
	if col == "" || col == "null" {
		return nil, nil
	}
	var devices []string
	if err := json.Unmarshal([]byte(col), &devices); err != nil {
		return nil, fmt.Errorf("decode devices: %w", err)
	}
	return devices, nil
}

func (t *tx) CreateWorkload(w store.Workload) error {
	_, err := t.exec(`INSERT INTO workloads (`+workloadCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, workloadArgs(w)...)
	if t.s.d.IsConflict(err) {
		return fmt.Errorf("workload %q: %w", w.ID, store.ErrExists)
	}
	if err != nil {
		return fmt.Errorf("workload %q: %w", w.ID, err)
	}
	return nil
}

func (t *tx) PutWorkload(w store.Workload) error {
	args := append(workloadArgs(w)[1:], w.ID)
	res, err := t.exec(`UPDATE workloads SET name = ?, tenant = ?, kind = ?, class = ?, region = ?, image = ?, state = ?,
		machine = ?, driver = ?, devices = ?, attempt = ?, mode_generation = ?, reason = ?, created = ?, since = ?,
		progress = ?, spec = ?, restarts = ? WHERE id = ?`, args...)
	if err != nil {
		return fmt.Errorf("workload %q: %w", w.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("workload %q: %w", w.ID, store.ErrNotFound)
	}
	return nil
}

func (t *tx) PutWorkloads(ws []store.Workload) error {
	last := make(map[string]int, len(ws))
	for i, w := range ws {
		last[w.ID] = i
	}
	rows := make([]store.Workload, 0, len(last))
	for i, w := range ws {
		if last[w.ID] == i {
			rows = append(rows, w)
		}
	}
	for len(rows) > 0 {
		n := rowsInNextStatement(len(rows))
		args := make([]any, 0, len(workloadTypes)*n)
		for _, w := range rows[:n] {
			args = append(args, workloadArgs(w)...)
		}
		res, err := t.exec(putWorkloadsQueries[n], args...)
		if err != nil {
			return fmt.Errorf("write %d workloads: %w", n, err)
		}
		if got, _ := res.RowsAffected(); got < int64(n) {
			return t.missingWorkload(rows[:n])
		}
		rows = rows[n:]
	}
	return nil
}

// missingWorkload names the first of ws not in the store: a write of
// several found fewer rows than it named.
func (t *tx) missingWorkload(ws []store.Workload) error {
	for _, w := range ws {
		var one int
		err := t.queryRow(`SELECT 1 FROM workloads WHERE id = ?`, w.ID).Scan(&one)
		if err != nil {
			return notFound("workload", w.ID, err)
		}
	}
	return fmt.Errorf("write %d workloads: fewer rows written than named", len(ws))
}

func (t *tx) Workload(id string) (store.Workload, error) {
	w, err := scanWorkload(t.queryRow(`SELECT `+workloadCols+` FROM workloads WHERE id = ?`, id))
	if err != nil {
		return w, notFound("workload", id, err)
	}
	return w, nil
}

func (t *tx) Workloads(f store.WorkloadFilter) ([]store.Workload, error) {
	query, args := workloadsQuery(f, t.s.d.Collate)
	rows, err := t.query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Workload
	for rows.Next() {
		w, err := scanWorkload(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, t.seen(rows.Err())
}

func (t *tx) WorkloadIDs(machineID string) ([]string, error) {
	return t.texts(`SELECT id FROM workloads WHERE machine = ? ORDER BY id`+t.s.d.Collate, machineID)
}

// Listed reads what a desired state lists in one statement: the
// workloads' columns it needs, beside their classes' sizes. A desired
// state read the full records, then each class in a statement of its
// own, and every machine a burst wakes reads one (issue 13).
func (t *tx) Listed(machineID string) ([]store.Listed, error) {
	rows, err := t.query(`SELECT w.id, w.kind, w.state, w.driver, w.image, w.devices, w.attempt, w.spec,
		w.class, w.created, COALESCE(c.cpus, 0), COALESCE(c.memory_mb, 0)
		FROM workloads w LEFT JOIN classes c ON c.name = w.class
		WHERE w.machine = ? ORDER BY w.created, w.id`+t.s.d.Collate, machineID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Listed
	for rows.Next() {
		var (
			l                    store.Listed
			kind, state, devices string
			spec                 string
			created              int64
		)
		if err := rows.Scan(&l.ID, &kind, &state, &l.Driver, &l.Image, &devices, &l.Attempt, &spec, &l.Class, &created, &l.CPUs, &l.MemoryMB); err != nil {
			return nil, err
		}
		l.Kind, l.State, l.Created = protocol.Kind(kind), store.State(state), fromTS(created)
		if l.Devices, err = readDevicesColumn(devices); err != nil {
			return nil, fmt.Errorf("workload %q: %w", l.ID, err)
		}
		if l.Spec, err = readSpecColumn(spec); err != nil {
			return nil, fmt.Errorf("workload %q: %w", l.ID, err)
		}
		out = append(out, l)
	}
	return out, t.seen(rows.Err())
}

// texts runs a query of one text column and returns its rows' values.
func (t *tx) texts(query string, args ...any) ([]string, error) {
	rows, err := t.query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, t.seen(rows.Err())
}

// workloadsQuery is the query Workloads runs for f, and its arguments.
func workloadsQuery(f store.WorkloadFilter, collate string) (string, []any) {
	query := `SELECT ` + workloadCols + ` FROM workloads WHERE 1 = 1`
	var args []any
	if f.Machine != "" {
		query += ` AND machine = ?`
		args = append(args, f.Machine)
	}
	if len(f.States) > 0 {
		query += ` AND state IN (?` + strings.Repeat(`, ?`, len(f.States)-1) + `)`
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if f.Region != "" {
		query += ` AND region = ?`
		args = append(args, f.Region)
	}
	if f.AfterID != "" {
		query += ` AND (created > ? OR (created = ? AND id` + collate + ` > ?))`
		args = append(args, ts(f.AfterCreated), ts(f.AfterCreated), f.AfterID)
	}
	query += ` ORDER BY created, id` + collate
	if f.Limit > 0 {
		query += ` LIMIT ` + strconv.Itoa(f.Limit)
	}
	return query, args
}

// deleteStatusesOf deletes a workload's statuses, on every machine.
const deleteStatusesOf = `DELETE FROM statuses WHERE workload = ?`

func (t *tx) DeleteWorkload(id string) error {
	if _, err := t.exec(deleteStatusesOf, id); err != nil {
		return fmt.Errorf("workload %q: %w", id, err)
	}
	res, err := t.exec(`DELETE FROM workloads WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("workload %q: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("workload %q: %w", id, store.ErrNotFound)
	}
	return nil
}

func (t *tx) PutStatus(s store.StatusRecord) error {
	var exit sql.NullInt64
	if s.ExitCode != nil {
		exit = sql.NullInt64{Int64: int64(*s.ExitCode), Valid: true}
	}
	_, err := t.exec(`INSERT INTO statuses (machine, workload, attempt, mode, generation, code, exit_code, detail, at, restarts)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (machine, workload) DO UPDATE SET attempt = excluded.attempt, mode = excluded.mode,
		generation = excluded.generation, code = excluded.code, exit_code = excluded.exit_code,
		detail = excluded.detail, at = excluded.at, restarts = excluded.restarts`,
		s.Machine, s.Workload, s.Attempt, string(s.Mode), s.Generation, string(s.Code), exit, s.Detail, ts(s.At), s.Restarts)
	return err
}

func (t *tx) DeleteStatus(machineID, workloadID string) error {
	_, err := t.exec(`DELETE FROM statuses WHERE machine = ? AND workload = ?`, machineID, workloadID)
	return err
}

func (t *tx) Statuses(machineID string) ([]store.StatusRecord, error) {
	rows, err := t.query(`SELECT machine, workload, attempt, mode, generation, code, exit_code, detail, at, restarts
		FROM statuses WHERE machine = ? ORDER BY workload`+t.s.d.Collate, machineID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.StatusRecord
	for rows.Next() {
		var s store.StatusRecord
		var mode, code string
		var exit sql.NullInt64
		var at int64
		if err := rows.Scan(&s.Machine, &s.Workload, &s.Attempt, &mode, &s.Generation, &code, &exit, &s.Detail, &at, &s.Restarts); err != nil {
			return nil, err
		}
		s.Mode, s.Code, s.At = protocol.Mode(mode), protocol.Code(code), fromTS(at)
		if exit.Valid {
			c := int(exit.Int64)
			s.ExitCode = &c
		}
		out = append(out, s)
	}
	return out, t.seen(rows.Err())
}

func (t *tx) AddTimeline(es ...store.TimelineEntry) error {
	t.lines = append(t.lines, es...)
	return nil
}

// rowsPerStatement is the most rows one statement writes. A write of n
// rows takes as many of these as fit, then one statement for each set bit
// of the rest, so the statements' texts are a handful and stay prepared.
const rowsPerStatement = 64

// rowsInNextStatement is how many of n rows waiting the next statement
// writes: the largest power of two up to rowsPerStatement that fits.
func rowsInNextStatement(n int) int {
	size := rowsPerStatement
	for size > n {
		size /= 2
	}
	return size
}

// writeLines writes the lines added since the last write, in the order
// added: one statement for many lines instead of one each, which a burst
// of placements (a line each) pays for in time under the store's writer.
func (t *tx) writeLines() error {
	for len(t.lines) > 0 {
		n := rowsInNextStatement(len(t.lines))
		args := make([]any, 0, 6*n)
		for _, e := range t.lines[:n] {
			args = append(args, e.Workload, ts(e.At), e.Text, e.Kind, max(e.Count, 1), ts(e.First))
		}
		_, err := t.exec(`INSERT INTO timeline (workload, at, text, kind, repeats, first_at) VALUES (?, ?, ?, ?, ?, ?)`+
			strings.Repeat(`, (?, ?, ?, ?, ?, ?)`, n-1), args...)
		if err != nil {
			return fmt.Errorf("write %d timeline lines: %w", n, err)
		}
		t.lines = t.lines[n:]
	}
	t.lines = nil
	return nil
}

const timelineColumns = `workload, at, text, kind, repeats, first_at`

func scanTimeline(sc interface{ Scan(...any) error }) (store.TimelineEntry, error) {
	var e store.TimelineEntry
	var at, first, repeats int64
	if err := sc.Scan(&e.Workload, &at, &e.Text, &e.Kind, &repeats, &first); err != nil {
		return e, err
	}
	e.At, e.First, e.Count = fromTS(at), fromTS(first), int(repeats)
	return e, nil
}

func (t *tx) Timeline(workloadID string) ([]store.TimelineEntry, error) {
	if err := t.writeLines(); err != nil {
		return nil, err
	}
	rows, err := t.query(`SELECT `+timelineColumns+` FROM timeline WHERE workload = ? ORDER BY seq`, workloadID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.TimelineEntry
	for rows.Next() {
		e, err := scanTimeline(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, t.seen(rows.Err())
}

func (t *tx) LastTimeline(workloadID string) (store.TimelineEntry, error) {
	if err := t.writeLines(); err != nil {
		return store.TimelineEntry{}, err
	}
	e, err := scanTimeline(t.queryRow(`SELECT `+timelineColumns+` FROM timeline WHERE workload = ? ORDER BY seq DESC LIMIT 1`, workloadID))
	if err != nil {
		return e, notFound("timeline of workload", workloadID, err)
	}
	return e, nil
}

func (t *tx) ReplaceLastTimeline(e store.TimelineEntry) error {
	if err := t.writeLines(); err != nil {
		return err
	}
	res, err := t.exec(`UPDATE timeline SET at = ?, text = ?, kind = ?, repeats = ?, first_at = ?
		WHERE seq = (SELECT MAX(seq) FROM timeline WHERE workload = ?)`,
		ts(e.At), e.Text, e.Kind, max(e.Count, 1), ts(e.First), e.Workload)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("timeline of workload %q: %w", e.Workload, store.ErrNotFound)
	}
	return nil
}

func (t *tx) TrimTimeline(workloadID string, keep int, note string) (int, error) {
	if keep < 1 {
		return 0, fmt.Errorf("trim timeline of workload %q: keep %d lines, want at least 1", workloadID, keep)
	}
	if err := t.writeLines(); err != nil {
		return 0, err
	}
	res, err := t.exec(`DELETE FROM timeline WHERE workload = ? AND seq <=
		(SELECT seq FROM timeline WHERE workload = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)`, workloadID, workloadID, keep)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		return 0, nil
	}
	_, err = t.exec(`UPDATE timeline SET text = ?, kind = '', repeats = 1, first_at = 0
		WHERE seq = (SELECT MIN(seq) FROM timeline WHERE workload = ?)`, note, workloadID)
	return int(n), err
}

func (t *tx) LongTimelines(keep, limit int) ([]string, error) {
	if err := t.writeLines(); err != nil {
		return nil, err
	}
	return t.texts(`SELECT workload FROM timeline GROUP BY workload HAVING COUNT(*) > ?
		ORDER BY workload`+t.s.d.Collate+` LIMIT ?`, keep, limit)
}

func (t *tx) DeleteRemovedTimelines(before time.Time) (int, error) {
	if err := t.writeLines(); err != nil {
		return 0, err
	}
	res, err := t.exec(`DELETE FROM timeline WHERE workload IN (SELECT l.workload FROM timeline l
		WHERE NOT EXISTS (SELECT 1 FROM workloads w WHERE w.id = l.workload)
		GROUP BY l.workload HAVING MAX(l.at) < ?)`, ts(before))
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

func (t *tx) PutCertificate(c store.Certificate) error {
	_, err := t.exec(`INSERT INTO certificates (serial, machine, issued, expires, revoked) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (serial) DO UPDATE SET machine = excluded.machine, issued = excluded.issued,
		expires = excluded.expires, revoked = excluded.revoked`,
		c.Serial, c.Machine, ts(c.Issued), ts(c.Expires), ts(c.Revoked))
	return err
}

const certificateColumns = `serial, machine, issued, expires, revoked`

func scanCertificate(sc interface{ Scan(...any) error }) (store.Certificate, error) {
	var c store.Certificate
	var issued, expires, revoked int64
	if err := sc.Scan(&c.Serial, &c.Machine, &issued, &expires, &revoked); err != nil {
		return c, err
	}
	c.Issued, c.Expires, c.Revoked = fromTS(issued), fromTS(expires), fromTS(revoked)
	return c, nil
}

func (t *tx) Certificate(serial string) (store.Certificate, error) {
	c, err := scanCertificate(t.queryRow(`SELECT `+certificateColumns+` FROM certificates WHERE serial = ?`, serial))
	if err != nil {
		return c, notFound("certificate", serial, err)
	}
	return c, nil
}

func (t *tx) Certificates(machineID string) ([]store.Certificate, error) {
	rows, err := t.query(`SELECT `+certificateColumns+` FROM certificates WHERE machine = ? ORDER BY issued, serial`+t.s.d.Collate, machineID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Certificate
	for rows.Next() {
		c, err := scanCertificate(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, t.seen(rows.Err())
}

func (t *tx) PruneCertificates(machineID string, now time.Time, keep int) (int, error) {
	res, err := t.exec(`DELETE FROM certificates WHERE machine = ? AND expires < ?`, machineID, ts(now))
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	res, err = t.exec(`DELETE FROM certificates WHERE machine = ? AND serial NOT IN
		(SELECT serial FROM certificates WHERE machine = ? ORDER BY issued DESC, serial DESC LIMIT ?)`, machineID, machineID, max(keep, 0))
	if err != nil {
		return 0, err
	}
	m, _ := res.RowsAffected()
	return int(n + m), nil
}

func (t *tx) CreateToken(tk store.Token) error {
	_, err := t.exec(`INSERT INTO tokens (hash, owner, region, created, expires, used) VALUES (?, ?, ?, ?, ?, ?)`,
		tk.Hash, tk.Owner, tk.Region, ts(tk.Created), ts(tk.Expires), ts(tk.Used))
	if t.s.d.IsConflict(err) {
		return fmt.Errorf("token: %w", store.ErrExists)
	}
	return err
}

func (t *tx) Tokens(limit int) ([]store.Token, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := t.query(`SELECT hash, owner, region, created, expires, used FROM tokens ORDER BY created DESC, hash`+t.s.d.Collate+` LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Token
	for rows.Next() {
		var tk store.Token
		var created, expires, used int64
		if err := rows.Scan(&tk.Hash, &tk.Owner, &tk.Region, &created, &expires, &used); err != nil {
			return nil, err
		}
		tk.Created, tk.Expires, tk.Used = fromTS(created), fromTS(expires), fromTS(used)
		out = append(out, tk)
	}
	return out, t.seen(rows.Err())
}

func (t *tx) UseToken(hash string, at time.Time) (store.Token, error) {
	var tk store.Token
	var created, expires, used int64
	err := t.queryRow(`SELECT hash, owner, region, created, expires, used FROM tokens WHERE hash = ?`, hash).
		Scan(&tk.Hash, &tk.Owner, &tk.Region, &created, &expires, &used)
	if err != nil {
		return tk, notFound("token", "…", err)
	}
	tk.Created, tk.Expires, tk.Used = fromTS(created), fromTS(expires), fromTS(used)
	if used != 0 {
		return tk, fmt.Errorf("token: %w", store.ErrUsed)
	}
	// The used = 0 guard makes two concurrent uses impossible even where
	// the transaction does not lock the row.
	res, err := t.exec(`UPDATE tokens SET used = ? WHERE hash = ? AND used = 0`, ts(at), hash)
	if err != nil {
		return tk, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return tk, fmt.Errorf("token: %w", store.ErrUsed)
	}
	tk.Used = at
	return tk, nil
}

func (t *tx) Lease(name string) (store.Lease, error) {
	var l store.Lease
	var expires int64
	err := t.queryRow(`SELECT name, holder, epoch, expires FROM leases WHERE name = ?`, name).Scan(&l.Name, &l.Holder, &l.Epoch, &expires)
	if err != nil {
		return l, notFound("lease", name, err)
	}
	l.Expires = fromTS(expires)
	return l, nil
}

func (t *tx) PutLease(l store.Lease) error {
	_, err := t.exec(`INSERT INTO leases (name, holder, epoch, expires) VALUES (?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, expires = excluded.expires`,
		l.Name, l.Holder, l.Epoch, ts(l.Expires))
	return err
}

func (t *tx) PutReplica(r store.Replica) error {
	_, err := t.exec(`INSERT INTO replicas (url, seen, polls) VALUES (?, ?, ?)
		ON CONFLICT (url) DO UPDATE SET seen = excluded.seen, polls = excluded.polls`, r.URL, ts(r.Seen), r.Polls)
	return err
}

func (t *tx) Replicas(since time.Time, limit int) ([]store.Replica, error) {
	rows, err := t.query(`SELECT url, seen, polls FROM replicas WHERE seen >= ? ORDER BY url`+t.s.d.Collate+` LIMIT ?`, ts(since), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Replica
	for rows.Next() {
		var r store.Replica
		var seen int64
		if err := rows.Scan(&r.URL, &seen, &r.Polls); err != nil {
			return nil, err
		}
		r.Seen = fromTS(seen)
		out = append(out, r)
	}
	return out, rows.Err()
}

func (t *tx) PruneReplicas(before time.Time) (int, error) {
	res, err := t.exec(`DELETE FROM replicas WHERE seen < ?`, ts(before))
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}
