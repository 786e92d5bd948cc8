package hub

import (
	"bytes"
	"testing"
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
		if err := checkRequest(req); err != nil {
			t.Fatalf("decoder accepted a request the checks refuse: %v", err)
		}
	})
}
