package httpapi

import (
	"bytes"
	"crypto/x509/pkix"
	"testing"

	"einsora.dev/edge/hub"
	"einsora.dev/edge/hub/ca"
	"einsora.dev/edge/protocol"
)

// FuzzDecodeSyncRequest: no body an agent can send makes the decoder
// panic, and whatever it accepts passes the request checks.
func FuzzDecodeSyncRequest(f *testing.F) {
	f.Add([]byte(`{"protocol_version":1,"generation":3,"applied_generation":2,"statuses":[{"workload":"w-1","attempt":1,"mode":"run","generation":2,"code":"running"}]}`))
	f.Add([]byte(`{"protocol_version":1,"inventory":{"os":"linux","arch":"amd64","cpus":4,"memory_mb":1024,"drivers":["sim"]}}`))
	f.Add([]byte(`{"protocol_version":1,"statuses":[{"workload":"w","exit_code":-1,"code":"exited"}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"protocol_version":1}{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeSyncRequest(bytes.NewReader(b))
		if err != nil {
			return
		}
		if err := hub.CheckSyncRequest(req); err != nil {
			t.Fatalf("decoder accepted a request the checks refuse: %v", err)
		}
	})
}

// FuzzDecodeEnrollRequest: no body makes the decoder panic, and whatever it
// accepts has a well-formed token, a valid machine ID and a CSR for an
// ECDSA P-256 key whose signature checks.
func FuzzDecodeEnrollRequest(f *testing.F) {
	var tok protocol.Token
	tok.Secret[0] = 1
	f.Add(enrolBody(f, tok, "m-1", pkix.Name{CommonName: "m-1"}))
	f.Add([]byte(`{"token":"est1.AAAA.BBBB","csr":"","machine_id":"m-1"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeEnrollRequest(bytes.NewReader(b))
		if err != nil {
			return
		}
		if _, err := protocol.ParseToken(req.Token.String()); err != nil {
			t.Fatalf("accepted a token that does not parse back: %v", err)
		}
		if err := ca.CheckMachineID(req.MachineID); err != nil {
			t.Fatalf("accepted machine id: %v", err)
		}
		if err := ca.CheckCSR(req.CSR); err != nil {
			t.Fatalf("accepted CSR: %v", err)
		}
		if len(req.Name) > 64 {
			t.Fatalf("name of %d bytes", len(req.Name))
		}
	})
}
