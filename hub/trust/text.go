package trust

import (
	"unicode"
	"unicode/utf8"
)

// Text is the one bound on text an agent reports (rule 10): it keeps only
// the runes unicode.IsPrint accepts, so control and format characters
// (escape sequences, NUL, U+0085, U+202E's reordering) never reach an
// operator's terminal, drops invalid UTF-8, and cuts to at most max bytes
// on a rune boundary, so what is stored is always valid UTF-8.
func Text(s string, max int) string {
	if max <= 0 {
		return ""
	}
	if clean(s, max) {
		return s // the common case costs no allocation
	}
	out := make([]byte, 0, min(len(s), max))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r == utf8.RuneError && size <= 1 || !unicode.IsPrint(r) {
			continue
		}
		if len(out)+size > max {
			break
		}
		out = append(out, s[i-size:i]...)
	}
	return string(out)
}

// clean reports whether s is within max bytes and all printable.
func clean(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 || !unicode.IsPrint(r) {
			return false
		}
		i += size
	}
	return true
}
