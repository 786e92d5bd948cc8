package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/hub/trust"
	"einsora.dev/edge/protocol"
)

// decodeAdmin reads an admin JSON body strictly: unknown fields, trailing
// data and oversized bodies are the caller's mistake.
func decodeAdmin(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("%w: request body over %d bytes", hub.ErrInvalid, tooBig.Limit)
		}
		return fmt.Errorf("%w: request body: %v", hub.ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: request body: trailing data after the JSON object", hub.ErrInvalid)
	}
	return checkPrintable(v)
}

// DecodeSyncRequest reads and checks a sync request. Unknown fields are
// ignored, so a newer agent may add optional ones; trailing data is refused.
// It is the decoder of untrusted input that FuzzDecodeSyncRequest exercises.
func DecodeSyncRequest(r io.Reader) (*protocol.SyncRequest, error) {
	var req protocol.SyncRequest
	dec := json.NewDecoder(r)
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("decode sync request: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("decode sync request: trailing data after the JSON object")
	}
	if err := hub.CheckSyncRequest(&req); err != nil {
		return nil, fmt.Errorf("sync request: %w", err)
	}
	return &req, nil
}

// Bounds on an enrolment request's fields.
const (
	maxTokenLen = 256
	maxCSRLen   = 8 << 10
	maxNameLen  = 256
	// maxMachineName bounds the name a machine is shown under.
	maxMachineName = 64
)

// DecodeEnrollRequest reads and checks an enrolment request: a well-formed
// token, a CSR for an ECDSA P-256 key with a valid signature, and a machine
// ID fit for a certificate. Unknown fields are ignored; trailing data is
// refused. It is the decoder of untrusted input that FuzzDecodeEnrollRequest
// exercises.
func DecodeEnrollRequest(r io.Reader) (*hub.EnrollRequest, error) {
	var in protocol.EnrollRequest
	dec := json.NewDecoder(r)
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("decode enrol request: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("decode enrol request: trailing data after the JSON object")
	}
	if len(in.Token) > maxTokenLen || len(in.CSR) > maxCSRLen || len(in.Name) > maxNameLen {
		return nil, errors.New("enrol request: a field is too long")
	}
	tok, err := protocol.ParseToken(in.Token)
	if err != nil {
		return nil, fmt.Errorf("enrol request: %w", err)
	}
	if err := ca.CheckMachineID(in.MachineID); err != nil {
		return nil, fmt.Errorf("enrol request: %w", err)
	}
	csr, err := ca.ParseCSR(in.CSR)
	if err != nil {
		return nil, fmt.Errorf("enrol request: %w", err)
	}
	return &hub.EnrollRequest{Token: tok, CSR: csr, MachineID: in.MachineID, Name: trust.Text(in.Name, maxMachineName)}, nil
}

// writeDecodeError answers a body that did not decode: too big is 413,
// anything else the caller's mistake, on one line.
func writeDecodeError(w http.ResponseWriter, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", tooBig.Limit))
		return
	}
	writeError(w, http.StatusBadRequest, oneLine(err.Error()))
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
