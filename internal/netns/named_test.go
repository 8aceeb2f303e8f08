package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// TestAddInterop: a namespace Add makes in-process is one ip(8) knows and
// deletes, each is a namespace of its own, and a name taken or bad is
// refused without harm to what exists.
func TestAddInterop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	a, b := Name(fmt.Sprintf("test%d", os.Getpid()), "a"), Name(fmt.Sprintf("test%d", os.Getpid()), "b")
	for _, ns := range []string{a, b} {
		if err := Add(ctx, ns); err != nil {
			t.Fatal(err)
		}
		defer Delete(ctx, ns)
	}
	inode := func(ns string) (ino uint64) {
		if err := Do(ns, func() error { ino = netnsInode(t); return nil }); err != nil {
			t.Fatal(err)
		}
		return ino
	}
	if inode(a) == inode(b) || inode(a) == netnsInode(t) {
		t.Fatal("namespaces are not distinct")
	}
	if out, err := exec.Command("ip", "-n", a, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip in an added namespace: %v: %s", err, out)
	}
	before := inode(a)
	for _, tc := range []struct{ name, ns string }{
		{"taken", a}, {"empty", ""}, {"dotdot", ".."}, {"path", "x/y"},
	} {
		if err := Add(ctx, tc.ns); err == nil {
			t.Errorf("%s: Add(%q) succeeded", tc.name, tc.ns)
		}
	}
	if !Exists(a) || inode(a) != before {
		t.Fatal("a refused Add harmed the namespace that had the name")
	}
	if out, err := exec.Command("ip", "netns", "delete", b).CombinedOutput(); err != nil || Exists(b) {
		t.Fatalf("ip netns delete of an added namespace: %v: %s", err, out)
	}
	if err := Delete(ctx, a); err != nil || Exists(a) {
		t.Fatalf("Delete: %v, exists %v", err, Exists(a))
	}
}
