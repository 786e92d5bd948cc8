package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"einsora.dev/edge/hubclient"
)

// Channel is the LISTEN/NOTIFY channel of wake-ups; a payload is the ID of
// the machine whose generation changed.
const Channel = "einsora_wake"

// Timings of Listen.
const (
	// ListenBackoffBase and ListenBackoffCap bound the full-jitter waits
	// between reconnects.
	ListenBackoffBase = 250 * time.Millisecond
	ListenBackoffCap  = 30 * time.Second
	// ListenPingAfter is how long the listening connection may be silent
	// before Listen pings it, so a dead peer is noticed in seconds rather
	// than when TCP keepalives give up.
	ListenPingAfter = 30 * time.Second
	listenPingLimit = 10 * time.Second
	connectTimeout  = 10 * time.Second
)

// Notify tells every replica listening on the database (this one
// included) that machineID's desired generation changed. The hub will call
// it after every commit that bumps a generation: after the commit,
// never inside the transaction, so no replica wakes to read old state.
// PostgreSQL delivers a notification only to sessions listening when it
// is sent, and Listen makes up for the gaps with wake("").
func (s *Store) Notify(ctx context.Context, machineID string) error {
	if _, err := s.db.ExecContext(ctx, `SELECT pg_notify($1, $2)`, Channel, machineID); err != nil {
		return fmt.Errorf("store: notify %q: %w", machineID, err)
	}
	return nil
}

// Listen holds one connection of its own (not from the pool) LISTENing
// on Channel and calls wake with the machine ID of each notification,
// from this replica or another, until ctx is done; the hub's wake wakes
// that machine's long polls held by this replica. wake runs on Listen's
// goroutine and must not block.
//
// When the connection drops, Listen reconnects with full-jitter backoff
// (hubclient.Backoff); notifications sent while it was away are lost, so
// after every LISTEN it calls wake("") meaning "wake every poll", and each
// poll re-reads its machine. The first LISTEN too: the hub takes polls
// before it is up, and a change notified meanwhile would otherwise wait a
// whole poll timeout (90 s with --poll-timeout 90s).
//
// Listen returns nil once ctx is done, and an error only if the store's
// DSN cannot be parsed; it retries every other failure.
func (s *Store) Listen(ctx context.Context, wake func(machineID string)) error {
	cfg, err := pgx.ParseConfig(s.dsn)
	if err != nil {
		return fmt.Errorf("store: listen: %w", err)
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "einsora-hub-listen"
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	bo := hubclient.Backoff{Base: ListenBackoffBase, Cap: ListenBackoffCap}
	for ctx.Err() == nil {
		listened, err := s.listen(ctx, cfg, wake)
		if ctx.Err() != nil {
			break
		}
		if listened {
			bo.Reset()
		}
		wait := bo.Next()
		log.Warn("store: wake-up listener lost its connection; reconnecting", "component", "store", "err", err, "wait", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// listen runs one connection until it fails or ctx is done. listened
// reports whether LISTEN succeeded on it.
func (s *Store) listen(ctx context.Context, cfg *pgx.ConnConfig, wake func(string)) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		conn.Close(cctx)
		cancel()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return false, err
	}
	if s.onListen != nil {
		s.onListen(conn.PgConn().PID())
	}
	wake("")
	for {
		wctx, cancel := context.WithTimeout(ctx, ListenPingAfter)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			wake(n.Payload)
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			// Silence: make sure the other end is still there. A timed-out
			// wait leaves the connection usable.
			pctx, cancel := context.WithTimeout(ctx, listenPingLimit)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return true, fmt.Errorf("ping: %w", err)
			}
		default:
			return true, err
		}
	}
}
