package serve

import (
	"crypto/tls"
	"fmt"
	"sync"
	"time"

	"einsora.dev/edge/hub/ca"
)

// ticketKeyLife is how long one session ticket key makes new tickets; a
// ticket is accepted for one more such span after its key is replaced.
const ticketKeyLife = 24 * time.Hour

// ticketKeys gives a server's TLS configuration session ticket keys derived
// from the CA's key and the day, instead of Go's random ones: a restarted
// hub, and every replica sharing its CA, resumes the sessions the others
// issued, so a fleet that comes back after a restart costs resumed
// handshakes rather than full ones (docs/protocol-network.md). A resumed
// session is still checked in VerifyConnection, so revocation holds.
type ticketKeys struct {
	ca *ca.CA
	mu sync.Mutex
	// span is the ticketKeyLife span the configuration's keys are for;
	// set says there are keys at all.
	span int64
	set  bool
}

// current is the span of the keys refresh set last.
func (t *ticketKeys) current() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.span
}

// refresh sets cfg's keys for now when its span has changed since the last
// call: the span's key makes tickets, its predecessor's is accepted. An
// error is returned once a span; cfg keeps its keys until the next.
func (t *ticketKeys) refresh(cfg *tls.Config, now time.Time) error {
	span := now.Unix() / int64(ticketKeyLife/time.Second)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.set && t.span == span {
		return nil
	}
	var keys [][32]byte
	// Taken even if the keys fail, so a failure is said once a span and
	// not at every handshake.
	t.span, t.set = span, true
	for _, s := range []int64{span, span - 1} {
		k, err := t.ca.Secret(fmt.Sprintf("tls session tickets %d", s))
		if err != nil {
			return err
		}
		keys = append(keys, k)
	}
	cfg.SetSessionTicketKeys(keys)
	return nil
}
