package qemu

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestListAndDestroyIdempotent(t *testing.T) {
	dir := t.TempDir()
	r := &Runtime{cfg: Config{Dir: dir}, uid: -1, gid: -1}
	r.log = discardLogger()
	for _, n := range []string{"sb-1", "sb-2", ".tmp", "BAD"} {
		os.Mkdir(filepath.Join(dir, n), 0o700)
	}
	ids, err := r.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"sb-1", "sb-2"}) {
		t.Fatalf("List = %v", ids)
	}
	if os.Geteuid() != 0 {
		return // Destroy runs ip netns only for namespaces that exist
	}
	for range 2 {
		if err := r.Destroy(context.Background(), "sb-1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Destroy(context.Background(), "never-was"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sb-1")); !os.IsNotExist(err) {
		t.Fatalf("sb-1 still there: %v", err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestMajorVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1) (tcg)", 10},
		{"QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3) (kvm)", 7},
		{"unknown", 0},
		{"QEMU emulator version x.y", 0},
	} {
		if got := majorVersion(tc.in); got != tc.want {
			t.Errorf("majorVersion(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
