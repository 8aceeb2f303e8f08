package fsutil

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestTarRoundTrip archives a tree with WriteTar and extracts it with
// ExtractTar elsewhere: the same files, modes and links.
func TestTarRoundTrip(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(src, "a", "b", "f"), []byte("content"), 0o640)
	os.Symlink("b/f", filepath.Join(src, "a", "l"))
	os.Link(filepath.Join(src, "a", "b", "f"), filepath.Join(src, "h"))
	root, _ := os.OpenRoot(src)
	defer root.Close()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := WriteTar(context.Background(), root, tw); err != nil {
		t.Fatal(err)
	}
	tw.Close()

	dst := t.TempDir()
	droot, _ := os.OpenRoot(dst)
	defer droot.Close()
	st, err := ExtractTar(context.Background(), droot, &buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st != (TarStats{Files: 1, Dirs: 2, Symlinks: 1, Links: 1, Bytes: 7}) {
		t.Errorf("stats %+v", st)
	}
	if fi, err := os.Stat(filepath.Join(dst, "a", "b", "f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("a/b/f: %v, %v", fi, err)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "a", "l")); l != "b/f" {
		t.Errorf("a/l -> %q", l)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "h")); string(b) != "content" {
		t.Errorf("h = %q", b)
	}
}

func TestExtractTarRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdrs []tar.Header
	}{
		{"dotdot", []tar.Header{{Name: "a/../../x", Typeflag: tar.TypeReg}}},
		{"absolute", []tar.Header{{Name: "/x", Typeflag: tar.TypeReg}}},
		{"through a symlink", []tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/"}, {Name: "l/x", Typeflag: tar.TypeReg}}},
		{"link out", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, h := range tc.hdrs {
				h.Mode = 0o644
				tw.WriteHeader(&h)
			}
			tw.Close()
			root, _ := os.OpenRoot(t.TempDir())
			defer root.Close()
			_, err := ExtractTar(context.Background(), root, &buf, nil)
			var te *TarEntryError
			if !errors.As(err, &te) {
				t.Errorf("err = %v, want a *TarEntryError", err)
			}
		})
	}
	root, _ := os.OpenRoot(t.TempDir())
	defer root.Close()
	if _, err := ExtractTar(context.Background(), root, bytes.NewReader(bytes.Repeat([]byte{1}, 1024)), nil); !errors.Is(err, ErrBadTar) {
		t.Errorf("garbage: %v, want ErrBadTar", err)
	}
}
