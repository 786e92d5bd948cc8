package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode"
)

// Bounds on the hub replicas' URLs an answer carries (SyncResponse.Hubs,
// CertificateResponse.Hubs). The hub is trusted, but a bug of its own must
// not grow an agent's state: an agent keeps at most MaxHubs of them, each at
// most MaxHubURLLen bytes.
const (
	MaxHubs      = 16
	MaxHubURLLen = 256
)

// CheckHubURL refuses a replica URL an agent must not keep or send to (a
// replica in SyncResponse.Hubs, or LogRequest.URL): longer than
// MaxHubURLLen, with control characters, or other than https://HOST[:PORT].
func CheckHubURL(s string) error {
	if len(s) > MaxHubURLLen {
		return fmt.Errorf("hub URL of %d bytes, at most %d", len(s), MaxHubURLLen)
	}
	if strings.ContainsFunc(s, unicode.IsControl) {
		return fmt.Errorf("hub URL %q holds control characters", s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("hub URL %q: %w", s, err)
	}
	if u.Scheme != "https" || u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" {
		return fmt.Errorf("hub URL %q: want https://HOST:PORT", s)
	}
	return nil
}

// KeepHubs is what an agent keeps of the replica URLs a hub sent: those
// CheckHubURL passes, without repeats, the first MaxHubs of them, in the
// hub's order. dropped counts what it left out.
func KeepHubs(urls []string) (kept []string, dropped int) {
	for _, u := range urls {
		if len(kept) == MaxHubs || CheckHubURL(u) != nil || slices.Contains(kept, u) {
			dropped++
			continue
		}
		kept = append(kept, u)
	}
	return kept, dropped
}

// HubsDigest names a set of replica URLs whatever their order: each replica
// sends its own first, so an agent that moves between replicas of one set
// is not sent the set again. Empty for no URLs.
func HubsDigest(urls []string) string {
	if len(urls) == 0 {
		return ""
	}
	sorted := slices.Sorted(slices.Values(urls))
	sum := sha256.Sum256([]byte(strings.Join(slices.Compact(sorted), "\n")))
	return hex.EncodeToString(sum[:12])
}
