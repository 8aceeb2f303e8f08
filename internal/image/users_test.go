package image

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestAddUser makes the account in a hard-link copy of a base: the base's
// files keep their content and inodes, the copy gets new ones with the
// owners and modes of the old.
func TestAddUser(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (chown)")
		}
		t.Skip("needs root (chown)")
	}
	tmp := t.TempDir()
	base, root := filepath.Join(tmp, "base"), filepath.Join(tmp, "image")
	files := map[string]string{
		"etc/passwd":       "root:x:0:0:root:/root:/bin/bash\n",
		"etc/group":        "root:x:0:\nshadow:x:42:\n",
		"etc/shadow":       "root:*:19000:0:99999:7:::", // no final newline
		"etc/skel/.bashrc": "# bashrc\n",
	}
	for p, c := range files {
		for _, d := range []string{base, root} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(d, p)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		mustWrite(t, filepath.Join(base, p), c)
		if err := os.Link(filepath.Join(base, p), filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(base, "etc/shadow"), 0, 42); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(base, "etc/shadow"), 0o640)
	if err := os.Mkdir(filepath.Join(root, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	u := defaultUser()
	if err := addUser(root, u); err != nil {
		t.Fatal(err)
	}
	for p, c := range files {
		if got := mustRead(t, filepath.Join(base, p)); got != c {
			t.Errorf("base %s changed: %q", p, got)
		}
	}
	if got := mustRead(t, filepath.Join(root, "etc/passwd")); !strings.HasSuffix(got, "\nuser:x:1000:1000::/home/user:/bin/bash\n") {
		t.Errorf("passwd %q", got)
	}
	if got := mustRead(t, filepath.Join(root, "etc/shadow")); !strings.HasSuffix(got, ":::\nuser:*:19000:0:99999:7:::\n") {
		t.Errorf("shadow %q", got)
	}
	for p, want := range map[string]struct {
		uid, gid uint32
		mode     os.FileMode
	}{
		"etc/shadow":              {0, 42, 0o640},
		"etc/gshadow":             {0, 0, 0o640},
		"etc/sudoers.d/cove-user": {0, 0, 0o440},
		"home/user":               {1000, 1000, os.ModeDir | 0o750},
		"home/user/.bashrc":       {1000, 1000, 0o644},
		"work":                    {1000, 1000, os.ModeDir | 0o755},
	} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Error(err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != want.uid || st.Gid != want.gid || fi.Mode() != want.mode {
			t.Errorf("%s: %d:%d %v, want %d:%d %v", p, st.Uid, st.Gid, fi.Mode(), want.uid, want.gid, want.mode)
		}
	}
	if err := addUser(root, u); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("adding the user twice: %v", err)
	}
}
