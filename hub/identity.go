package hub

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/store"
)

// One identity per machine: the hub stores every certificate it issues
// (serial, machine, issue and expiry), refuses to enrol a machine ID that
// holds a live one unless an operator replaced it, and refuses revoked
// serials at the TLS layer and on every request.

// ErrCertificateRevoked: the client certificate was revoked by serial, or
// replaced (403). It is an ErrRevoked too, which agents read as revoked.
var ErrCertificateRevoked error = certificateRevoked{}

type certificateRevoked struct{}

func (certificateRevoked) Error() string        { return "certificate revoked" }
func (certificateRevoked) Is(target error) bool { return target == ErrRevoked }

// legacySerialPrefix names the placeholder of a certificate issued before
// serials were stored; no real serial (hex) starts with it.
const legacySerialPrefix = "before-serials:"

// maxCertificates bounds the certificates kept per machine: renewals add
// one each, so an agent renewing in a loop would grow the table. Past it,
// the oldest are forgotten, and a forgotten serial of a machine whose
// serials are known is refused like a revoked one.
const maxCertificates = 16

// recordCertificate stores the certificate just issued to m and prunes
// m's expired ones and those past maxCertificates.
func recordCertificate(tx store.Tx, machineID string, certPEM []byte, now time.Time) error {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return errors.New("record certificate: the CA returned no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("record certificate: %w", err)
	}
	if err := tx.PutCertificate(store.Certificate{Serial: ca.Serial(cert), Machine: machineID, Issued: now, Expires: cert.NotAfter}); err != nil {
		return err
	}
	_, err = tx.PruneCertificates(machineID, now, maxCertificates)
	return err
}

// liveCertificate returns a certificate of m still valid at now, if any. A
// machine enrolled before serials were stored has none on record: its
// CertExpires stands for the certificate it holds.
func liveCertificate(tx store.Tx, m store.Machine, now time.Time) (serial string, expires time.Time, live bool, err error) {
	cs, err := tx.Certificates(m.ID)
	if err != nil {
		return "", time.Time{}, false, err
	}
	for _, c := range cs {
		if c.Live(now) {
			return c.Serial, c.Expires, true, nil
		}
	}
	if len(cs) == 0 && now.Before(m.CertExpires) {
		return "unknown: issued before serials were stored", m.CertExpires, true, nil
	}
	return "", time.Time{}, false, nil
}

// refuseTakeover refuses to enrol m again while it holds a live
// certificate: a second party would hold the same identity.
func refuseTakeover(tx store.Tx, m store.Machine, now time.Time) error {
	serial, expires, live, err := liveCertificate(tx, m, now)
	if err != nil || !live {
		return err
	}
	return fmt.Errorf("%w: machine %s already holds a live certificate (serial %s, expires %s); if this is a new agent for that machine, an operator must first run: einsora-hub machine replace %s",
		ErrForbidden, m.ID, serial, expires.UTC().Format(time.RFC3339), m.ID)
}

// ReplaceMachine lets the next enrolment of machine id through: it revokes
// every certificate the machine holds, so whoever holds them is refused
// from now on, and ends its waiting long poll. The machine keeps its
// record, owner and workloads.
func (h *Hub) ReplaceMachine(ctx context.Context, id string) error {
	var revoked []string
	err := h.store.Update(ctx, func(tx store.Tx) error {
		m, err := tx.Machine(id)
		if err != nil {
			return err
		}
		if m.Revoked {
			return fmt.Errorf("%w: machine %s was revoked for good; it cannot be replaced, only removed (einsora-hub machine rm %s)", ErrInvalid, id, id)
		}
		cs, err := tx.Certificates(id)
		if err != nil {
			return err
		}
		revoked, err = h.revokeWhere(tx, id, func(store.Certificate) bool { return true })
		if err != nil {
			return err
		}
		now := h.clk.Now()
		if len(cs) == 0 && now.Before(m.CertExpires) {
			// A certificate issued before serials were stored has no
			// serial to revoke. A revoked placeholder gives the machine a
			// record, so every serial not on it is refused until the old
			// certificate would have expired.
			legacy := store.Certificate{Serial: legacySerialPrefix + id, Machine: id, Issued: now, Expires: m.CertExpires, Revoked: now}
			if err := tx.PutCertificate(legacy); err != nil {
				return err
			}
			revoked = append(revoked, legacy.Serial)
		}
		// Its expiry no longer blocks enrolment.
		m.CertExpires = time.Time{}
		return tx.PutMachine(m)
	})
	if err != nil {
		return fmt.Errorf("replace machine %s: %w", id, err)
	}
	h.log.Warn("machine replaced: its certificates are revoked and its next enrolment is let through", "machine", id, "serials", revoked)
	h.Wake(id)
	return nil
}

// RevokeCertificate revokes one certificate by its serial (lowercase hex,
// as machine show lists it). With machineID set, the serial must be one
// of that machine's.
func (h *Hub) RevokeCertificate(ctx context.Context, machineID, serial string) error {
	serial = strings.ToLower(strings.TrimPrefix(strings.ReplaceAll(serial, ":", ""), "0x"))
	var owner string
	err := h.store.Update(ctx, func(tx store.Tx) error {
		c, err := tx.Certificate(serial)
		if err != nil {
			return err
		}
		if machineID != "" && c.Machine != machineID {
			return fmt.Errorf("%w: certificate %s is machine %s's, not %s's", ErrInvalid, serial, c.Machine, machineID)
		}
		owner = c.Machine
		if !c.Revoked.IsZero() {
			return nil
		}
		c.Revoked = h.clk.Now()
		return tx.PutCertificate(c)
	})
	if err != nil {
		return fmt.Errorf("revoke certificate %s: %w", serial, err)
	}
	h.log.Warn("certificate revoked", "machine", owner, "serial", serial)
	// Its poll may be held by any replica, for minutes.
	h.Wake(owner)
	h.notifyReplicas(ctx, owner)
	return nil
}

// revokeWhere revokes machineID's live certificates that match and returns
// their serials.
func (h *Hub) revokeWhere(tx store.Tx, machineID string, match func(store.Certificate) bool) ([]string, error) {
	cs, err := tx.Certificates(machineID)
	if err != nil {
		return nil, err
	}
	now := h.clk.Now()
	var out []string
	for _, c := range cs {
		if !c.Revoked.IsZero() || !match(c) {
			continue
		}
		c.Revoked = now
		if err := tx.PutCertificate(c); err != nil {
			return nil, err
		}
		out = append(out, c.Serial)
	}
	return out, nil
}

// Certificates returns the certificates the hub issued to machine id,
// oldest first.
func (h *Hub) Certificates(ctx context.Context, id string) ([]store.Certificate, error) {
	var cs []store.Certificate
	err := h.store.View(ctx, func(tx store.Tx) (err error) { cs, err = tx.Certificates(id); return err })
	return cs, err
}

// CheckCertificate refuses a client certificate that is revoked by serial,
// or that the hub does not know for a machine whose serials it knows
// (forgotten past maxCertificates, or from a replaced store). It does not
// check the machine itself: CheckIdentity does, on every handshake. The
// HTTP layer calls this on every request, since a certificate may be
// revoked while its connection stays open.
func (h *Hub) CheckCertificate(ctx context.Context, machineID, serial string) error {
	return h.checkIdentity(ctx, machineID, serial, false)
}

// CheckIdentity is CheckMachine and CheckCertificate in one read of the
// store: the TLS layer's check of every handshake, which a fleet
// connecting at once makes thousands of times a second.
func (h *Hub) CheckIdentity(ctx context.Context, machineID, serial string) error {
	return h.checkIdentity(ctx, machineID, serial, true)
}

func (h *Hub) checkIdentity(ctx context.Context, machineID, serial string, machine bool) error {
	// Every request of an agent passes here first: a replica cut off
	// from its store must send the agent away at once, not hang it on the
	// store (issue 18). ErrNotReady is the hub's failure, which another
	// replica may not share, never the certificate's.
	if h.feed.failingNow() {
		return fmt.Errorf("certificate %s of machine %s: %w: this replica cannot reach its store", serial, machineID, ErrNotReady)
	}
	ctx, cancel := context.WithTimeout(ctx, h.feed.every)
	defer cancel()
	var c store.Certificate
	known := true
	err := h.store.View(ctx, func(tx store.Tx) (err error) {
		if machine {
			if err := refuseMachine(tx, machineID); err != nil {
				return err
			}
		}
		c, err = tx.Certificate(serial)
		if errors.Is(err, store.ErrNotFound) {
			known = false
			cs, err := tx.Certificates(machineID)
			if err != nil {
				return err
			}
			if len(cs) > 0 {
				return &certRefused{fmt.Errorf("certificate %s of machine %s: %w: the hub has no record of it", serial, machineID, ErrCertificateRevoked)}
			}
			return nil // issued before serials were stored
		}
		return err
	})
	var refused *certRefused
	switch {
	case errors.As(err, &refused):
		return refused.err
	case err != nil:
		return fmt.Errorf("certificate %s of machine %s: %w: its store failed: %w", serial, machineID, ErrNotReady, err)
	case !known:
		return nil
	case c.Machine != machineID:
		return fmt.Errorf("certificate %s names machine %s but was issued to %s: %w", serial, machineID, c.Machine, ErrCertificateRevoked)
	case !c.Revoked.IsZero():
		return fmt.Errorf("certificate %s of machine %s: %w at %s (the machine was replaced, or an operator revoked the certificate)",
			serial, machineID, ErrCertificateRevoked, c.Revoked.UTC().Format(time.RFC3339))
	}
	return nil
}

// certRefused carries CheckCertificate's refusal out of its transaction,
// apart from the store's own errors.
type certRefused struct{ err error }

func (e *certRefused) Error() string { return e.err.Error() }
func (e *certRefused) Unwrap() error { return e.err }
