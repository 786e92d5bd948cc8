package hub

import (
	"fmt"

	"einsora.dev/edge/protocol"
)

// reasons maps each failure code to the fixed sentence users see. What an
// agent reports is never shown: only these sentences and numbers are.
var reasons = map[protocol.Code]string{
	protocol.CodeOOMKilled:            "it ran out of memory and was stopped",
	protocol.CodeFailedStart:          "its machine could not start it",
	protocol.CodeImageUnavailable:     "its image could not be had on its machine",
	protocol.CodeLost:                 "its machine no longer has it",
	protocol.CodeDriverUnavailable:    "its machine's runtime is not answering",
	protocol.CodeRefusedDriverMissing: "its machine does not have the driver it was placed on",
	protocol.CodeRefusedIsolation:     "its machine's driver does not isolate it as strongly as it needs",
	protocol.CodeRefusedDriverChange:  "its machine holds its data under another driver",
	protocol.CodeStopped:              "it was stopped on its machine",
}

// unknownReason is what any code outside the vocabulary reads.
const unknownReason = "its machine reported a problem"

// failure reports whether code ends an attempt. A code outside the
// vocabulary is a failure too: an agent sends only the codes of the protocol
// version it speaks, so an unknown one is a problem, not news.
func failure(code protocol.Code) bool {
	if code == protocol.CodeExited || !code.Known() {
		return true
	}
	_, ok := reasons[code]
	return ok
}

// reason is the fixed sentence for a status.
func reason(s protocol.Status) string {
	if s.Code == protocol.CodeExited {
		if s.ExitCode != nil {
			return fmt.Sprintf("it exited with code %d", *s.ExitCode)
		}
		return "it exited"
	}
	if r, ok := reasons[s.Code]; ok {
		return r
	}
	return unknownReason
}
