package trust

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestTextStripsAndBounds(t *testing.T) {
	tests := []struct {
		name, in string
		max      int
		want     string
	}{
		{"plain", "nginx:1.27", 64, "nginx:1.27"},
		{"empty", "", 8, ""},
		{"zero_bound", "abc", 0, ""},
		{"rtl_override", "evil\u202egnp.exe", 64, "evilgnp.exe"},
		{"next_line", "a\u0085b", 64, "ab"},
		{"escape", "\x1b[31mred\x1b[0m", 64, "[31mred[0m"},
		{"nul", "a\x00b", 64, "ab"},
		{"tab_newline_cr", "a\tb\nc\rd", 64, "abcd"},
		{"del", "a\x7fb", 64, "ab"},
		{"zero_width_space", "a\u200bb", 64, "ab"},
		{"bom", "\ufeffabc", 64, "abc"},
		{"invalid_utf8", "Xeon\xff\xfe", 64, "Xeon"},
		{"truncated_sequence", "ab\xe2\x82", 64, "ab"},
		{"encoded_replacement_kept", "a\ufffdb", 64, "a\ufffdb"},
		{"cut_at_bound", "abcdef", 4, "abcd"},
		// "é" is two bytes: at a bound of 4 after "abc" it does not fit,
		// and half of it is never kept.
		{"multibyte_at_boundary", "abcé", 4, "abc"},
		{"multibyte_fits", "abcé", 5, "abcé"},
		{"four_byte_at_boundary", "ab😀", 5, "ab"},
		{"stripped_before_bounding", "\x1b\x1b\x1babcd", 4, "abcd"},
		{"unicode_letters", "Grüße 東京", 64, "Grüße 東京"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Text(tt.in, tt.max); got != tt.want {
				t.Errorf("Text(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
		})
	}
}

// FuzzText: whatever comes in, what comes out is valid UTF-8, all
// printable, within the bound, and unchanged by a second pass.
func FuzzText(f *testing.F) {
	f.Add("plain", 16)
	f.Add("evil\u202egnp.exe", 8)
	f.Add("a\u0085b\x00c\x1b[0m", 3)
	f.Add("Xeon\xff\xfe\xe2\x82", 5)
	f.Add("abcé😀", 4)
	f.Add(strings.Repeat("東", 100), 256)
	f.Fuzz(func(t *testing.T, s string, max int) {
		max %= 1 << 12
		got := Text(s, max)
		if !utf8.ValidString(got) {
			t.Fatalf("Text(%q, %d) = %q: not valid UTF-8", s, max, got)
		}
		if len(got) > max && !(max <= 0 && got == "") {
			t.Fatalf("Text(%q, %d) = %d bytes", s, max, len(got))
		}
		if i := strings.IndexFunc(got, func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
			t.Fatalf("Text(%q, %d) = %q: unprintable rune at %d", s, max, got, i)
		}
		if again := Text(got, max); again != got {
			t.Fatalf("not idempotent: %q then %q", got, again)
		}
	})
}
