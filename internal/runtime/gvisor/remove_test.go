package gvisor

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRemoveTree: a tree without mounts is removed; one with a mount below
// is detached first, so nothing of the mounted directory is deleted.
func TestRemoveTree(t *testing.T) {
	root := t.TempDir()
	host := filepath.Join(root, "host")
	os.MkdirAll(host, 0o755)
	os.WriteFile(filepath.Join(host, "keep"), []byte("x"), 0o644)
	plain := filepath.Join(root, "plain")
	os.MkdirAll(filepath.Join(plain, "bundle"), 0o755)
	os.WriteFile(filepath.Join(plain, "bundle", "config.json"), nil, 0o644)
	withMount := filepath.Join(root, "mounted")
	os.MkdirAll(filepath.Join(withMount, "overlay"), 0o755)
	canMount := unix.Mount(host, filepath.Join(withMount, "overlay"), "", unix.MS_BIND, "") == nil
	for _, tc := range []struct {
		name      string
		dir       string
		wantMount bool
		skip      bool
	}{
		{"plain", plain, false, false},
		{"missing", filepath.Join(root, "missing"), false, false},
		{"a bind mount below", withMount, true, !canMount},
	} {
		if tc.skip {
			t.Logf("%s: skipped (cannot mount: needs root)", tc.name)
			continue
		}
		got, err := holdsMount(tc.dir)
		if err != nil {
			t.Skipf("statx cannot tell mount roots here: %v", err)
		}
		if got != tc.wantMount {
			t.Errorf("%s: holdsMount = %v, want %v", tc.name, got, tc.wantMount)
		}
		if err := removeTree(tc.dir); err != nil {
			t.Errorf("%s: removeTree: %v", tc.name, err)
		}
		if _, err := os.Stat(tc.dir); !os.IsNotExist(err) {
			t.Errorf("%s: still there: %v", tc.name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(host, "keep")); err != nil {
		t.Errorf("the mounted directory's file was deleted: %v", err)
	}
}
