package randhex

import "testing"

func TestNew(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		s := New(8)
		if len(s) != 16 || seen[s] {
			t.Fatalf("New(8) = %q (len %d, seen %v)", s, len(s), seen[s])
		}
		seen[s] = true
	}
}
