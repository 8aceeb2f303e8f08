package qemu

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestParseUIDRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want UIDRange
		ok   bool
	}{
		{"200000:64", UIDRange{200000, 64}, true},
		{"1000:1", UIDRange{1000, 1}, true},
		{"0:10", UIDRange{}, false},      // root
		{"999:10", UIDRange{}, false},    // system users
		{"200000:0", UIDRange{}, false},  // none
		{"200000:-1", UIDRange{}, false}, // negative
		{"2147483000:1000", UIDRange{}, false},
		{"200000", UIDRange{}, false},
		{"a:b", UIDRange{}, false},
		{"", UIDRange{}, false},
	} {
		got, err := ParseUIDRange(tc.in)
		if (err == nil) != tc.ok || tc.ok && got != tc.want {
			t.Errorf("ParseUIDRange(%q) = %+v, %v; want %+v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestUIDPool: each VM its own uid, the same on asking again; none left is
// ErrNoUID; a uid given back is handed out again; a restarted daemon finds
// the uids of the VM directories it inherits.
func TestUIDPool(t *testing.T) {
	p := newUIDPool(UIDRange{Base: 300000, Count: 2})
	a, err := p.get("vm-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.get("vm-b")
	if err != nil {
		t.Fatal(err)
	}
	if a == b || a < 300000 || a > 300001 || b < 300000 || b > 300001 {
		t.Fatalf("uids %d and %d: want the two of the range", a, b)
	}
	if again, _ := p.get("vm-a"); again != a {
		t.Errorf("vm-a asked again: %d, want %d", again, a)
	}
	if _, err := p.get("vm-c"); !errors.Is(err, ErrNoUID) {
		t.Errorf("a third VM in a range of two: %v, want ErrNoUID", err)
	}
	p.put("vm-a")
	p.put("vm-a") // twice is nothing
	if _, ok := p.lookup("vm-a"); ok {
		t.Error("vm-a keeps its uid after put")
	}
	if c, err := p.get("vm-c"); err != nil || c != a {
		t.Errorf("vm-c after vm-a's put: %d, %v; want %d", c, err, a)
	}

	if os.Geteuid() != 0 {
		return // recovery reads directory owners, which only root can set
	}
	dir := t.TempDir()
	for id, uid := range map[string]int{"vm-x": 300001, "vm-y": 0, "vm-z": 400000, "BAD": 300000} {
		d := filepath.Join(dir, id)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	q := newUIDPool(UIDRange{Base: 300000, Count: 2})
	if err := q.recover(dir); err != nil {
		t.Fatal(err)
	}
	if uid, ok := q.lookup("vm-x"); !ok || uid != 300001 {
		t.Errorf("vm-x recovered as %d, %v; want 300001", uid, ok)
	}
	for _, id := range []string{"vm-y", "vm-z", "BAD"} {
		if _, ok := q.lookup(id); ok {
			t.Errorf("%s (not in the range, or not a VM) got a uid", id)
		}
	}
	if n, err := q.get("vm-new"); err != nil || n != 300000 {
		t.Errorf("a new VM after recovery: %d, %v; want 300000, the one left", n, err)
	}
}
