package netns

import (
	"context"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestName(t *testing.T) {
	for _, tc := range []struct{ id, role, want string }{
		{"sb-1", "g", "cove-sb-1-g"},
		{"vm-a", "v", "cove-vm-a-v"},
	} {
		if got := Name(tc.id, tc.role); got != tc.want {
			t.Errorf("Name(%q, %q) = %q, want %q", tc.id, tc.role, got, tc.want)
		}
	}
}

// TestDo makes a namespace, runs a function inside it and deletes it: the
// function sees the namespace's network, the caller's thread its own.
func TestDo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	ns := Name(fmt.Sprintf("test%d", os.Getpid()), "t")
	if Exists(ns) {
		t.Fatalf("%s exists before Add", ns)
	}
	if err := Add(ctx, ns); err != nil {
		t.Fatal(err)
	}
	defer Delete(ctx, ns)
	self := netnsInode(t)
	var inside uint64
	if err := Do(ns, func() error { inside = netnsInode(t); return nil }); err != nil {
		t.Fatal(err)
	}
	if inside == self {
		t.Fatal("fn ran in the caller's namespace")
	}
	if netnsInode(t) != self {
		t.Fatal("the caller's namespace changed")
	}
	if err := Do("no-such-ns", func() error { return nil }); err == nil {
		t.Fatal("Do in a missing namespace succeeded")
	}
	for range 2 { // the second finds nothing to delete
		if err := Delete(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if Exists(ns) {
		t.Fatalf("%s exists after Delete", ns)
	}
}

func netnsInode(t *testing.T) uint64 {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
