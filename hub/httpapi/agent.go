package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/protocol"
)

// SyncHandler serves POST /agent/v1/sync. identify names the machine from
// the request: its verified client certificate over HTTPS.
func (a *API) SyncHandler(identify func(*http.Request) (string, error)) http.Handler {
	// The answer is written by a function of its own: this frame stays
	// on a held poll's stack, kept small (docs/performance.md, "A held
	// poll's stack").
	return machineHandler(identify, func(w http.ResponseWriter, r *http.Request, machineID string) {
		req, err := DecodeSyncRequest(http.MaxBytesReader(w, r.Body, protocol.MaxSyncBody))
		if err != nil {
			writeDecodeError(w, err)
			return
		}
		resp, err := a.hub.Sync(a.parking(r, machineID), machineID, req)
		if errors.Is(err, hub.ErrParked) {
			return
		}
		a.answerSync(w, r.Context(), machineID, resp, err)
	})
}

// A Parker takes a held poll's connection off the server while the hub
// parks the poll (hub.Parking); the server that can do so puts it in the
// request's context (WithParker).
type Parker interface {
	// Parked: the hub parked the poll; cancel ends it unanswered.
	Parked(cancel func())
	// Answer writes the parked poll's answer, as write would write it to
	// a ResponseWriter.
	Answer(write func(http.ResponseWriter))
}

type parkerKey struct{}

// WithParker returns ctx offering p to park a poll the hub would hold.
func WithParker(ctx context.Context, p Parker) context.Context {
	return context.WithValue(ctx, parkerKey{}, p)
}

// parking is r's context, asking the hub to park a poll it would hold
// where r's server offered a Parker. The answer is then written later, as
// answerSync writes it now.
func (a *API) parking(r *http.Request, machineID string) context.Context {
	pk, _ := r.Context().Value(parkerKey{}).(Parker)
	if pk == nil {
		return r.Context()
	}
	// Nothing of r: the answer needs none of it, and r, its context
	// included, would keep the request's and its connection's state
	// (net/http's buffers, the context's chain) while the poll is parked.
	return hub.WithParking(r.Context(), &hub.Parking{
		Parked: pk.Parked,
		Deliver: func(resp *protocol.SyncResponse, err error) {
			pk.Answer(func(w http.ResponseWriter) { a.answerSync(w, context.Background(), machineID, resp, err) })
		},
	})
}

// answerSync writes what Sync returned.
func (a *API) answerSync(w http.ResponseWriter, ctx context.Context, machineID string, resp *protocol.SyncResponse, err error) {
	if _, _, ok := statusOf(err); err != nil && !ok && ctx.Err() == nil {
		a.log.Error("sync failed; sending the agent to reconnect", "machine", machineID, "err", err)
		sendAway(w)
		return
	}
	if err != nil {
		a.fail(w, ctx, err, "sync failed", "the hub failed to sync; the agent will retry", "machine", machineID)
		return
	}
	out := *resp // a copy: resp may be the cached desired state
	out.ProtocolVersion = protocol.Version
	if a.ReconnectWindow != nil {
		out.ReconnectWindowMS = a.ReconnectWindow().Milliseconds()
	}
	writeJSON(w, http.StatusOK, &out)
}

// EnrollHandler serves POST /agent/v1/enroll, which needs no client
// certificate: the token authenticates it.
func (a *API) EnrollHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "use POST")
			return
		}
		req, err := DecodeEnrollRequest(http.MaxBytesReader(w, r.Body, protocol.MaxEnrollBody))
		if err != nil {
			writeDecodeError(w, err)
			return
		}
		resp, err := a.hub.Enroll(r.Context(), req)
		a.certAnswer(w, r, resp, err)
	})
}

// RenewHandler serves POST /agent/v1/renew, authenticated by the machine's
// current client certificate (named by identify).
func (a *API) RenewHandler(identify func(*http.Request) (string, error)) http.Handler {
	return machineHandler(identify, func(w http.ResponseWriter, r *http.Request, machineID string) {
		var in protocol.RenewRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, protocol.MaxEnrollBody))
		if err := dec.Decode(&in); err != nil {
			writeDecodeError(w, fmt.Errorf("decode renew request: %w", err))
			return
		}
		csr, err := ca.ParseCSR(in.CSR)
		if err != nil {
			writeError(w, http.StatusBadRequest, "renew request: "+err.Error())
			return
		}
		resp, err := a.hub.Renew(r.Context(), machineID, csr)
		a.certAnswer(w, r, resp, err)
	})
}

func (a *API) certAnswer(w http.ResponseWriter, r *http.Request, resp *protocol.CertificateResponse, err error) {
	if err != nil {
		a.fail(w, r.Context(), err, "enrolment failed", "the hub failed to sign a certificate; try again later")
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// machineHandler serves POSTs of the machine that identify names (from its
// client certificate), refusing other methods and unidentified callers.
func machineHandler(identify func(*http.Request) (string, error), serve func(w http.ResponseWriter, r *http.Request, machineID string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "use POST")
			return
		}
		machineID, err := identify(r)
		if errors.Is(err, hub.ErrNotReady) {
			// Not the caller's fault: this replica cannot check its
			// certificate (its store does not answer).
			sendAway(w)
			return
		}
		if err != nil {
			// A revoked certificate is the hub's refusal (403); anything
			// else is a caller not identified.
			if code, msg, ok := statusOf(err); ok {
				writeError(w, code, msg)
				return
			}
			writeError(w, http.StatusUnauthorized, err.Error())
			return
		}
		serve(w, r, machineID)
	})
}

// sendAway answers the hub's own failure (its store, almost always): 503
// with Retry-After, closing the connection (over HTTP/2 a GOAWAY), so that
// through a load balancer, or to its next --hub, the agent reaches a
// replica that can answer instead of retrying this one.
func sendAway(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Connection", "close")
	writeError(w, http.StatusServiceUnavailable, "this hub cannot answer now (its store is unreachable or failing); the agent reconnects, through the load balancer to another replica")
}

// IdentifyClientCert names the machine of a request by its verified client
// certificate, and refuses a certificate that expired while its connection
// stayed open. It is the identify function of SyncHandler over HTTPS.
func (a *API) IdentifyClientCert(r *http.Request) (string, error) {
	id, serial, err := a.ClientCert(r)
	if err != nil {
		return "", err
	}
	// Revoked while its connection stayed open: the handshake's check is
	// not enough.
	if err := a.hub.CheckCertificate(r.Context(), id, serial); err != nil {
		return "", err
	}
	return id, nil
}

// ClientCert is IdentifyClientCert without the store's word on the
// certificate: for a request whose connection's handshake has just had it.
func (a *API) ClientCert(r *http.Request) (id, serial string, err error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "", "", errors.New("no client certificate: enrol this machine first with: einsora-agent enroll --hub URL --token TOKEN")
	}
	leaf := r.TLS.VerifiedChains[0][0]
	if now := a.clk.Now(); now.After(leaf.NotAfter) {
		return "", "", fmt.Errorf("this machine's certificate expired at %s; check the machine's clock, then enrol it again with: einsora-agent enroll", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	id, err = ca.MachineID(leaf)
	if err != nil {
		return "", "", err
	}
	return id, ca.Serial(leaf), nil
}
