package outtext

import (
	"strings"
	"testing"
)

func TestLastLine(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "",
		"one":                    "one",
		"a\nb\n\n":               "b",
		strings.Repeat("x", 400): strings.Repeat("x", maxLine),
	} {
		if got := LastLine(in); got != want {
			t.Errorf("LastLine(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSplitRunes(t *testing.T) {
	euro := "€" // three bytes
	for _, tc := range []struct{ in, whole, rest string }{
		{"", "", ""},
		{"abc", "abc", ""},
		{"a" + euro, "a" + euro, ""},
		{"a" + euro[:1], "a", euro[:1]},
		{"a" + euro[:2], "a", euro[:2]},
		{"\xff", "\xff", ""}, // not a character's start: sent as it is
	} {
		w, r := SplitRunes([]byte(tc.in))
		if string(w) != tc.whole || string(r) != tc.rest {
			t.Errorf("SplitRunes(%q) = %q, %q; want %q, %q", tc.in, w, r, tc.whole, tc.rest)
		}
	}
}
