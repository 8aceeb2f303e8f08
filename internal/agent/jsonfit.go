package agent

import "unicode/utf8"

// jsonFit cuts s so that its JSON encoding takes at most budget bytes, and
// reports whether it cut. Answers travel as one JSON frame whose size
// agentproto bounds at about four times MaxOutput, assuming output grows
// at most twofold when escaped; but encoding/json writes a NUL or a '<' as
// six bytes, so binary or markup-heavy output could otherwise produce an
// answer the host refuses.
func jsonFit(s string, budget int) (string, bool) {
	if len(s)*6 <= budget {
		return s, false
	}
	n := 0
	for i := 0; i < len(s); {
		c, size, cost := s[i], 1, 1
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				cost = 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				cost = 6 // \u00XX
			}
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			cost = size
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				cost = 6 // \ufffd, \u2028, \u2029
			}
		}
		if n+cost > budget {
			return s[:i], true
		}
		n += cost
		i += size
	}
	return s, false
}
