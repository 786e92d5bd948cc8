package hub

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"einsora.dev/edge/hub/store"
	"einsora.dev/edge/hub/trust"
	"einsora.dev/edge/protocol"
)

// Errors of enrolment and renewal; the HTTP layer maps them to status codes.
var (
	// ErrTokenRefused: the enrolment token is unknown, used, expired, or
	// for another hub (401).
	ErrTokenRefused = errors.New("enrolment token refused")
	// ErrForbidden: the machine may not enrol (403): it belongs to another
	// owner, or it was revoked.
	ErrForbidden = errors.New("forbidden")
	// ErrRevoked: the machine was revoked by an operator (403).
	ErrRevoked = errors.New("machine revoked")
	// ErrNoCA: this hub enrols no machines (solo).
	ErrNoCA = errors.New("this hub has no certificate authority")
)

// Bounds on enrolment tokens' lives.
const (
	DefaultTokenTTL = time.Hour
	MinTokenTTL     = time.Minute
	MaxTokenTTL     = 30 * 24 * time.Hour
)

// CreateEnrollToken makes a single-use enrolment token that fixes the owner
// and region of the machine that enrols with it, valid for ttl (zero means
// DefaultTokenTTL). Only the hash of its secret is stored; the token itself
// is returned once.
func (h *Hub) CreateEnrollToken(ctx context.Context, owner, region string, ttl time.Duration) (protocol.Token, time.Time, error) {
	var tok protocol.Token
	if h.cfg.CA == nil {
		return tok, time.Time{}, fmt.Errorf("%w: %w; enrolment tokens are for hubs started with: einsora-hub serve", ErrInvalid, ErrNoCA)
	}
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	if ttl < MinTokenTTL || ttl > MaxTokenTTL {
		return tok, time.Time{}, fmt.Errorf("%w: ttl %s: want between %s and %s", ErrInvalid, ttl, MinTokenTTL, MaxTokenTTL)
	}
	if err := checkName("region", region); err != nil {
		return tok, time.Time{}, err
	}
	tok.Fingerprint = h.cfg.CA.Fingerprint()
	if _, err := rand.Read(tok.Secret[:]); err != nil {
		return tok, time.Time{}, err
	}
	now := h.clk.Now()
	expires := now.Add(ttl)
	err := h.store.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.Tenant(owner); errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: no tenant %q; create it with: einsora-hub tenant create %s", ErrInvalid, owner, owner)
		} else if err != nil {
			return err
		}
		return tx.CreateToken(store.Token{Hash: tok.SecretHash(), Owner: owner, Region: region, Created: now, Expires: expires})
	})
	if err != nil {
		return protocol.Token{}, time.Time{}, err
	}
	h.log.Info("enrolment token created", "owner", owner, "region", region, "expires", expires)
	return tok, expires, nil
}

// maxMachineName bounds the name a machine is shown under: it is the
// machine's own word.
const maxMachineName = 64

// EnrollRequest is a decoded, checked enrolment request (see
// httpapi.DecodeEnrollRequest).
type EnrollRequest struct {
	Token     protocol.Token
	CSR       *x509.CertificateRequest
	MachineID string
	Name      string
}

// Enroll admits a machine: it uses the token (once), registers the machine
// with the token's owner and region (whatever the CSR says is ignored), and
// signs its client certificate, all in one transaction, so a refused
// enrolment leaves the token unused. A known machine enrolling for another
// owner is refused until an operator removes it, and a revoked one for good.
func (h *Hub) Enroll(ctx context.Context, req *EnrollRequest) (*protocol.CertificateResponse, error) {
	if h.cfg.CA == nil {
		return nil, ErrNoCA
	}
	if req.Token.Fingerprint != h.cfg.CA.Fingerprint() {
		return nil, fmt.Errorf("%w: it was made by another hub (its CA fingerprint is not this hub's); ask this hub's operator for a token", ErrTokenRefused)
	}
	now := h.clk.Now()
	var resp *protocol.CertificateResponse
	err := h.store.Update(ctx, func(tx store.Tx) error {
		tok, err := tx.UseToken(req.Token.SecretHash(), now)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("%w: this hub does not know it; ask its operator for a new one (einsora-hub token create)", ErrTokenRefused)
		case errors.Is(err, store.ErrUsed):
			return fmt.Errorf("%w: it was used before (tokens are single-use); ask for a new one (einsora-hub token create)", ErrTokenRefused)
		case err != nil:
			return err
		case !now.Before(tok.Expires):
			return fmt.Errorf("%w: it expired at %s; ask for a new one (einsora-hub token create)", ErrTokenRefused, tok.Expires.UTC().Format(time.RFC3339))
		}
		// RegisterMachine's rule, in this transaction.
		m, err := tx.Machine(req.MachineID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			m = store.Machine{ID: req.MachineID, Registered: now}
		case err != nil:
			return err
		case m.Revoked:
			return fmt.Errorf("%w: machine %s was revoked and cannot enrol again under this ID; delete the machine-id file in the agent's state directory to enrol it as a new machine", ErrForbidden, m.ID)
		case m.Owner != "" && m.Owner != tok.Owner:
			return fmt.Errorf("%w: machine %s belongs to %s; an operator must remove it before it enrols for %s", ErrForbidden, m.ID, m.Owner, tok.Owner)
		}
		if err := refuseTakeover(tx, m, now); err != nil {
			return err
		}
		if name := trust.Text(req.Name, maxMachineName); name != "" {
			m.Name = name
		}
		m.Owner, m.Region = tok.Owner, tok.Region
		resp, err = h.issue(tx, m, req.CSR, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("enrol %s: %w", req.MachineID, err)
	}
	resp.Hubs = h.Hubs()
	h.log.Info("machine enrolled", "machine", resp.MachineID, "owner", resp.Owner, "region", resp.Region, "cert_expires", resp.Expires)
	h.wakeLeader(ctx, true, resp.MachineID)
	return resp, nil
}

// issue signs m's client certificate from csr and saves m with its expiry,
// in the caller's transaction: enrolment and renewal end the same way.
func (h *Hub) issue(tx store.Tx, m store.Machine, csr *x509.CertificateRequest, now time.Time) (*protocol.CertificateResponse, error) {
	certPEM, notAfter, err := h.cfg.CA.SignMachine(csr, m.ID)
	if err != nil {
		return nil, err
	}
	m.CertExpires = notAfter
	if err := tx.PutMachine(m); err != nil {
		return nil, err
	}
	if err := recordCertificate(tx, m.ID, certPEM, now); err != nil {
		return nil, err
	}
	return &protocol.CertificateResponse{
		MachineID: m.ID, Owner: m.Owner, Region: m.Region, Certificate: string(certPEM),
		CA: string(h.cfg.CA.CertificatePEM()), Expires: notAfter, HubTime: now,
	}, nil
}

// Renew signs a new client certificate for machineID, named by its current,
// verified client certificate.
func (h *Hub) Renew(ctx context.Context, machineID string, csr *x509.CertificateRequest) (*protocol.CertificateResponse, error) {
	if h.cfg.CA == nil {
		return nil, ErrNoCA
	}
	now := h.clk.Now()
	var resp *protocol.CertificateResponse
	err := h.store.Update(ctx, func(tx store.Tx) error {
		m, err := tx.Machine(machineID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return ErrUnknownMachine
		case err != nil:
			return err
		case m.Revoked:
			return ErrRevoked
		}
		resp, err = h.issue(tx, m, csr, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("renew %s: %w", machineID, err)
	}
	h.log.Debug("certificate renewed", "machine", machineID, "cert_expires", resp.Expires)
	return resp, nil
}

// EnrollTokens returns the newest limit enrolment tokens, newest first.
// Only their hashes are stored: none can be shown again.
func (h *Hub) EnrollTokens(ctx context.Context, limit int) (ts []store.Token, err error) {
	err = h.store.View(ctx, func(tx store.Tx) error { ts, err = tx.Tokens(limit); return err })
	return ts, err
}
