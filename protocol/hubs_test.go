package protocol

import (
	"fmt"
	"strings"
	"testing"
)

func TestKeepHubsBoundsWhatAnAgentKeeps(t *testing.T) {
	in := []string{
		"https://a.example:8443",
		"http://plain.example:8443",           // not https
		"https://b.example:8443/path",         // a path
		"https://c.example:8443\n",            // a control character
		"https://" + strings.Repeat("d", 300), // too long
		"https://a.example:8443",              // a repeat
		"https://user@e.example:8443",         // credentials
		"https://f.example:8443",
	}
	kept, dropped := KeepHubs(in)
	if want := []string{"https://a.example:8443", "https://f.example:8443"}; fmt.Sprint(kept) != fmt.Sprint(want) || dropped != 6 {
		t.Errorf("got %v, %d dropped; want %v, 6 dropped", kept, dropped, want)
	}
	var many []string
	for i := range 3 * MaxHubs {
		many = append(many, fmt.Sprintf("https://h%d.example:8443", i))
	}
	if kept, dropped := KeepHubs(many); len(kept) != MaxHubs || dropped != 2*MaxHubs || kept[0] != many[0] {
		t.Errorf("kept %d of %d (dropped %d), want the first %d", len(kept), len(many), dropped, MaxHubs)
	}
}

func TestHubsDigestIgnoresOrder(t *testing.T) {
	a := HubsDigest([]string{"https://a:1", "https://b:1"})
	if b := HubsDigest([]string{"https://b:1", "https://a:1"}); a != b {
		t.Errorf("digests differ by order: %s, %s", a, b)
	}
	if c := HubsDigest([]string{"https://a:1", "https://c:1"}); a == c {
		t.Error("two sets share a digest")
	}
	if HubsDigest(nil) != "" {
		t.Error("no URLs: want an empty digest")
	}
}
