package runtime

import "testing"

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"sb-0123456789ab": true,
		"a":               true,
		"":                false,
		"../x":            false,
		"sb/1":            false,
		"SB-1":            false,
		"sb 1":            false,
		"x-123456789012345678901234567890123456789012": false, // too long for a netns name
	} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}
