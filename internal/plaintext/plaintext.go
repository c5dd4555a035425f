// Package plaintext checks that identifiers given by users (model names,
// request and credential ids) are printable text: valid UTF-8 without NUL
// or other control characters, which would corrupt logs, file names and
// JSON-lines output downstream.
package plaintext

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Check returns an error naming what (say "model name") when s is not
// valid UTF-8 or holds a control character (C0, DEL or C1, newlines and
// tabs included); the error quotes s with Go escapes, so it prints safely.
func Check(what, s string) error {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && invalidAt(s, i):
			return fmt.Errorf("%s %q: invalid UTF-8 at byte %d", what, s, i)
		case unicode.IsControl(r):
			return fmt.Errorf("%s %q: control character %U at byte %d", what, s, r, i)
		}
	}
	return nil
}

// invalidAt reports whether the rune at byte i of s is an encoding error
// (rather than a real U+FFFD).
func invalidAt(s string, i int) bool {
	_, size := utf8.DecodeRuneInString(s[i:])
	return size == 1
}
