package apitype

import "testing"

func TestParseMode(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"", 0, true},
		{"0755", 0o755, true},
		{"644", 0o644, true},
		{"4755", 0o4755, true},
		{"7777", 0o7777, true},
		{"10000", 0, false},
		{"0x1ff", 0, false},
		{"rwx", 0, false},
		{"-1", 0, false},
		{"0999", 0, false},
	} {
		got, err := ParseMode(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("ParseMode(%q) = %#o, %v; want %#o, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
