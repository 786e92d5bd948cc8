package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"
)

// Bounds of the tables a stranger can make grow: sign-in links are made
// only with the admin token, sessions only by signing in, but neither table
// may grow without end.
const (
	maxSessions = 64
	maxLinks    = 16
	sessionTTL  = 12 * time.Hour
	linkTTL     = 5 * time.Minute
)

type session struct {
	csrf    string
	expires time.Time
}

// table holds sessions and one-time sign-in links, each bounded: when full,
// the entry that expires first makes room.
type table struct {
	mu       sync.Mutex
	sessions map[string]session
	links    map[string]time.Time
}

func newTable() *table {
	return &table{sessions: map[string]session{}, links: map[string]time.Time{}}
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

// newSession returns a new session's ID and CSRF token.
func (t *table) newSession(now time.Time) (id string, s session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, v := range t.sessions {
		if !now.Before(v.expires) {
			delete(t.sessions, k)
		}
	}
	if len(t.sessions) >= maxSessions {
		evictFirst(t.sessions, func(s session) time.Time { return s.expires })
	}
	id, s = randomToken(), session{csrf: randomToken(), expires: now.Add(sessionTTL)}
	t.sessions[id] = s
	return id, s
}

func (t *table) session(id string, now time.Time) (session, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.sessions[id]
	if ok && !now.Before(s.expires) {
		delete(t.sessions, id)
		return session{}, false
	}
	return s, ok
}

func (t *table) endSession(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.sessions, id)
}

// newLink returns a one-time sign-in code.
func (t *table) newLink(now time.Time) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, exp := range t.links {
		if !now.Before(exp) {
			delete(t.links, k)
		}
	}
	if len(t.links) >= maxLinks {
		evictFirst(t.links, func(e time.Time) time.Time { return e })
	}
	code := randomToken()
	t.links[code] = now.Add(linkTTL)
	return code
}

// useLink consumes a code: it signs in once, and only before it expires.
func (t *table) useLink(code string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, exp := range t.links {
		if subtle.ConstantTimeCompare([]byte(k), []byte(code)) == 1 {
			delete(t.links, k)
			return now.Before(exp)
		}
	}
	return false
}

func (t *table) size() (sessions, links int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions), len(t.links)
}

func evictFirst[V any](m map[string]V, expires func(V) time.Time) {
	var first string
	var at time.Time
	for k, v := range m {
		if e := expires(v); first == "" || e.Before(at) {
			first, at = k, e
		}
	}
	delete(m, first)
}
