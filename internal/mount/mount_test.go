package mount

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	in := `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
36 22 0:5 / /var/lib/cove/images/base/.tmp-x/rootfs/proc rw,nosuid - proc proc rw
37 22 0:6 / /mnt/with\040space rw - tmpfs tmpfs rw
38 22 0:7 / /mnt/back\134slash rw - tmpfs tmpfs rw
short line
`
	got, err := parseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/", "/var/lib/cove/images/base/.tmp-x/rootfs/proc", "/mnt/with space", `/mnt/back\slash`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestRemoveAllUnmounts checks the guard that keeps a cleanup from
// descending into a mount left below the tree it removes.
func TestRemoveAllUnmounts(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to mount")
		}
		t.Skip("needs root to mount")
	}
	root := filepath.Join(t.TempDir(), "tree")
	mnt := filepath.Join(root, "rootfs/proc")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	if m, _ := Under(root); len(m) != 1 {
		t.Fatalf("Under = %v, want the tmpfs", m)
	}
	if err := RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("still there: %v", err)
	}
	if m, _ := Under(root); len(m) > 0 {
		t.Errorf("still mounted: %v", m)
	}
}
