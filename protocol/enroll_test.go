package protocol

import (
	"errors"
	"strings"
	"testing"
)

func testToken() Token {
	var t Token
	for i := range t.Fingerprint {
		t.Fingerprint[i] = byte(i)
		t.Secret[i] = byte(255 - i)
	}
	return t
}

func TestTokenRoundTrip(t *testing.T) {
	want := testToken()
	s := want.String()
	if !strings.HasPrefix(s, TokenPrefix) || len(s) != len(TokenPrefix)+2*tokenPartLen+1 {
		t.Fatalf("got %q", s)
	}
	got, err := ParseToken("  " + s + "\n")
	if err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	if got.SecretHash() == "" || got.SecretHash() == want.String() {
		t.Errorf("secret hash %q", got.SecretHash())
	}
}

func TestParseTokenRefuses(t *testing.T) {
	good := testToken().String()
	fp, secret, _ := strings.Cut(strings.TrimPrefix(good, TokenPrefix), ".")
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"no_prefix", strings.TrimPrefix(good, TokenPrefix)},
		{"other_version", "est2." + fp + "." + secret},
		{"one_part", TokenPrefix + fp},
		{"three_parts", good + ".x"},
		{"short_secret", TokenPrefix + fp + "." + secret[:42]},
		{"padded", TokenPrefix + fp + "=." + secret},
		{"std_alphabet", TokenPrefix + strings.Repeat("+", 43) + "." + secret},
		{"non_canonical_tail", TokenPrefix + fp[:42] + "B." + secret},
		{"newline_inside", TokenPrefix + fp[:20] + "\n" + fp[21:] + "." + secret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseToken(tt.in); !errors.Is(err, ErrMalformedToken) {
				t.Fatalf("got %v, want ErrMalformedToken", err)
			}
		})
	}
}

// FuzzParseToken: no input makes the parser panic, and whatever it accepts
// spells back to itself, so one token has one spelling.
func FuzzParseToken(f *testing.F) {
	f.Add(testToken().String())
	f.Add("est1..")
	f.Add("est1.AAAA.BBBB")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			if !errors.Is(err, ErrMalformedToken) {
				t.Fatalf("error %v does not wrap ErrMalformedToken", err)
			}
			return
		}
		if got := tok.String(); got != strings.TrimSpace(s) {
			t.Fatalf("accepted %q, which spells back as %q", s, got)
		}
	})
}
