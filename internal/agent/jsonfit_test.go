package agent

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestJSONFit(t *testing.T) {
	tests := []struct {
		name   string
		s      string
		budget int
		want   string
		cut    bool
	}{
		{"short", "hello", 30, "hello", false},
		{"exact", "aaaaaa", 6, "aaaaaa", false},
		{"plain", "aaaaaaaaaa", 6, "aaaaaa", true},
		{"nul", "\x00\x00\x00\x00", 13, "\x00\x00", true},
		{"html", "<<<<", 12, "<<", true},
		{"quote and newline", "\"\n\"\n", 6, "\"\n\"", true},
		{"multibyte kept whole", "ééé", 5, "éé", true},
		{"invalid utf-8", "\xff\xff", 7, "\xff", true},
		{"line separator", "\u2028\u2028", 8, "\u2028", true},
	}
	for _, tt := range tests {
		got, cut := jsonFit(tt.s, tt.budget)
		if got != tt.want || cut != tt.cut {
			t.Errorf("%s: jsonFit(%q, %d) = %q, %v; want %q, %v", tt.name, tt.s, tt.budget, got, cut, tt.want, tt.cut)
		}
	}
}

// TestJSONFitBound checks the estimate against encoding/json itself.
func TestJSONFitBound(t *testing.T) {
	inputs := []string{
		strings.Repeat("\x00", 1000),
		strings.Repeat("<a href=\"x\">&amp;</a>\n", 100),
		strings.Repeat("\xff\xfe日本\u2028\t", 200),
		strings.Repeat("plain text ", 300),
	}
	for _, s := range inputs {
		for _, budget := range []int{10, 100, 1000, 2500} {
			got, _ := jsonFit(s, budget)
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(b) - 2; n > budget { // minus the quotes
				t.Errorf("jsonFit(%.20q..., %d) encodes to %d bytes", s, budget, n)
			}
		}
	}
}
