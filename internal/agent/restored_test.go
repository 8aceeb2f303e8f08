package agent

import (
	"os"
	"testing"
)

// TestAddEntropy mixes a seed in through the agent's open /dev/urandom and
// through one opened for the call.
func TestAddEntropy(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (RNDADDENTROPY)")
		}
		t.Skip("needs root (RNDADDENTROPY)")
	}
	kept, err := openURandom()
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	for _, tc := range []struct {
		name string
		f    *os.File
	}{
		{"kept open", kept},
		{"opened per call", nil},
	} {
		if err := addEntropy(tc.f, []byte("0123456789abcdef0123456789abcdef")); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// The kept file stays usable: the call does not close it.
	if err := addEntropy(kept, []byte("again")); err != nil {
		t.Errorf("second call on the kept file: %v", err)
	}
}
