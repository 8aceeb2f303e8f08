// Package outtext shapes a command's output for people and JSON: its last
// line for an error message, and writes cut only between characters.
package outtext

import (
	"strings"
	"unicode/utf8"
)

// maxLine bounds LastLine, which goes into error messages.
const maxLine = 300

// LastLine is the last non-blank line of s, at most maxLine bytes.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > maxLine {
		s = s[:maxLine]
	}
	return s
}

// SplitRunes splits b before an incomplete character at its end, which
// the next write may complete: whole can be sent as text without
// garbling a character cut across writes.
func SplitRunes(b []byte) (whole, rest []byte) {
	cut := len(b)
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i
			}
			break
		}
	}
	return b[:cut], b[cut:]
}
