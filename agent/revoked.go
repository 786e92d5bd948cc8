package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"einsora.dev/edge/hubclient"
	"einsora.dev/edge/internal/atomicfile"
)

// revokedFile records that the hub revoked this machine, for `status` and
// `doctor`, which run apart from the agent. Enrolling again removes it.
const revokedFile = "revoked.json"

// RevokedRetry is how often a revoked agent asks the hub again: slowly, since
// only an operator can change the answer, but not never, so a hub restored
// from a backup that predates the revocation is found.
const RevokedRetry = 5 * time.Minute

// Revocation is the hub's refusal of this machine, as recorded.
type Revocation struct {
	At      time.Time `json:"at"`
	Message string    `json:"message"`
}

// revokedHelp is what a revoked machine's owner reads.
func revokedHelp(hubURL string) string {
	if hubURL == "" {
		hubURL = "URL"
	}
	return "this machine's certificate was revoked by the hub; enrol again with a new token: einsora-agent enroll --hub " + hubURL +
		" --token TOKEN (the hub refuses a revoked machine ID: stop the agent and delete the machine-id file in its state directory first, so it enrols as a new machine)"
}

// isRevoked reports whether err is the hub refusing this machine as revoked:
// its 403 with a revoked body, or a handshake refused with that alert.
func isRevoked(err error) bool {
	var he *hubclient.HubError
	if errors.As(err, &he) {
		return he.Code == http.StatusForbidden && strings.Contains(strings.ToLower(he.Message), "revoked")
	}
	var te *hubclient.TLSRefusedError
	return errors.As(err, &te) && te.Alert == "certificate revoked"
}

// stillRefused reports whether err, after the hub said revoked, is more of
// the same: the hub refuses a revoked machine's later handshakes with
// whatever alert its TLS stack sends.
func stillRefused(err error) bool {
	var te *hubclient.TLSRefusedError
	return isRevoked(err) || errors.As(err, &te)
}

func writeRevoked(dir string, r Revocation) error {
	b, _ := json.Marshal(r)
	if err := atomicfile.Write(filepath.Join(dir, revokedFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("record the revocation: %w", err)
	}
	return nil
}

func clearRevoked(dir string) error {
	if err := os.Remove(filepath.Join(dir, revokedFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("clear the revocation: %w", err)
	}
	return nil
}

// readRevoked returns the recorded revocation, or nil.
func readRevoked(dir string) *Revocation {
	b, err := os.ReadFile(filepath.Join(dir, revokedFile))
	if err != nil {
		return nil
	}
	var r Revocation
	if json.Unmarshal(b, &r) != nil {
		// Unreadable, but written only on a revocation.
		return &Revocation{Message: "the hub revoked this machine (" + revokedFile + " is unreadable)"}
	}
	return &r
}
