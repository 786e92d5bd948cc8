package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Paths of enrolment and renewal. Enrol needs no client certificate (the
// token authenticates it); renew is authenticated by the machine's current
// client certificate.
const (
	EnrollPath = "/agent/v1/enroll"
	RenewPath  = "/agent/v1/renew"
)

// MaxEnrollBody bounds enrol and renew bodies: a token, a CSR and an ID.
const MaxEnrollBody = 16 << 10

// MachineURIPrefix starts the URI SAN that names a machine in its client
// certificate: einsora:machine:<id>. The certificate's common name is the ID
// too; the hub requires both to agree.
const MachineURIPrefix = "einsora:machine:"

// EnrollRequest is the body of POST /agent/v1/enroll.
type EnrollRequest struct {
	// Token is the enrolment token as printed by `einsora-hub token create`.
	Token string `json:"token"`
	// CSR is a PEM "CERTIFICATE REQUEST" for the agent's ECDSA P-256 key.
	// Only its key and signature count: owner and region come from the
	// token alone, and the subject from MachineID.
	CSR string `json:"csr"`
	// MachineID is the ID saved next to the agent's database.
	MachineID string `json:"machine_id"`
	// Name is the machine's host name, for display only.
	Name string `json:"name,omitempty"`
}

// RenewRequest is the body of POST /agent/v1/renew.
type RenewRequest struct {
	// CSR is a PEM "CERTIFICATE REQUEST", as in EnrollRequest.
	CSR string `json:"csr"`
}

// CertificateResponse answers enrol and renew: the machine's new client
// certificate and the hub's CA.
type CertificateResponse struct {
	MachineID string `json:"machine_id"`
	Owner     string `json:"owner"`
	Region    string `json:"region"`
	// Certificate is the PEM client certificate.
	Certificate string `json:"certificate"`
	// CA is the PEM certificate of the hub's CA, whose SHA-256 fingerprint
	// the token carried.
	CA string `json:"ca"`
	// Expires is the certificate's NotAfter.
	Expires time.Time `json:"expires"`
	// HubTime is the hub's clock, so an agent can warn about skew.
	HubTime time.Time `json:"hub_time"`
	// Hubs are the agents' URLs of the hub's live replicas, the answering
	// one first (as SyncResponse.Hubs); omitted when it knows none.
	Hubs []string `json:"hubs,omitempty"`
}

// TokenPrefix starts every enrolment token; the digit is the format version.
const TokenPrefix = "est1."

// Token is an enrolment token: est1.<fingerprint>.<secret>, both parts
// unpadded base64url of 32 bytes. The fingerprint is the SHA-256 of the
// hub's CA certificate (DER), which the agent pins before it sends anything;
// the secret is what the hub stores the hash of.
type Token struct {
	Fingerprint [32]byte
	Secret      [32]byte
}

// ErrMalformedToken is wrapped by every error of ParseToken.
var ErrMalformedToken = errors.New("malformed enrolment token")

const tokenPartLen = 43 // base64.RawURLEncoding.EncodedLen(32)

// ParseToken reads a token as printed by `einsora-hub token create`. Spaces
// around it are ignored; anything else out of place is refused.
func ParseToken(s string) (Token, error) {
	var t Token
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, TokenPrefix)
	if !ok {
		return t, fmt.Errorf("%w: want it to start with %q; copy it whole from `einsora-hub token create`", ErrMalformedToken, TokenPrefix)
	}
	fp, secret, ok := strings.Cut(rest, ".")
	if !ok || len(fp) != tokenPartLen || len(secret) != tokenPartLen {
		return t, fmt.Errorf("%w: want est1.<43 characters>.<43 characters>; copy it whole from `einsora-hub token create`", ErrMalformedToken)
	}
	if err := decodePart(t.Fingerprint[:], fp); err != nil {
		return t, fmt.Errorf("%w: fingerprint: %v", ErrMalformedToken, err)
	}
	if err := decodePart(t.Secret[:], secret); err != nil {
		return t, fmt.Errorf("%w: secret: %v", ErrMalformedToken, err)
	}
	return t, nil
}

// decodePart decodes one 32-byte part strictly: the encoding must be the
// canonical one, so one token has one spelling.
func decodePart(dst []byte, s string) error {
	n, err := base64.RawURLEncoding.Strict().Decode(dst, []byte(s))
	if err != nil {
		return err
	}
	if n != len(dst) {
		return fmt.Errorf("%d bytes, want %d", n, len(dst))
	}
	return nil
}

// String spells the token as ParseToken reads it.
func (t Token) String() string {
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(t.Fingerprint[:]) + "." + base64.RawURLEncoding.EncodeToString(t.Secret[:])
}

// SecretHash is what the hub stores: the hex SHA-256 of the secret.
func (t Token) SecretHash() string {
	sum := sha256.Sum256(t.Secret[:])
	return hex.EncodeToString(sum[:])
}

// FingerprintOf returns the fingerprint of a certificate: the SHA-256 of its
// DER.
func FingerprintOf(der []byte) [32]byte { return sha256.Sum256(der) }

// FingerprintMatches reports whether der has the fingerprint fp.
func FingerprintMatches(der []byte, fp [32]byte) bool {
	sum := sha256.Sum256(der)
	return bytes.Equal(sum[:], fp[:])
}
