package fsutil

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func layerTar(t *testing.T, hdrs []tar.Header) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		body := []byte(h.Linkname)
		if h.Typeflag == tar.TypeReg {
			h.Linkname, h.Size = "", int64(len(body))
		} else {
			body = nil
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	tw.Close()
	return &buf
}

// files lists the regular files and directories under dir, relative.
func files(t *testing.T, dir string) []string {
	var out []string
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error {
		if rel, _ := filepath.Rel(dir, p); rel != "." {
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// TestExtractLayers applies a second layer's whiteouts to a first's files.
func TestExtractLayers(t *testing.T) {
	reg := func(name, content string) tar.Header {
		return tar.Header{Name: name, Typeflag: tar.TypeReg, Linkname: content}
	}
	dir := func(name string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755} }
	lower := []tar.Header{dir("a/"), reg("a/gone", "x"), reg("a/kept", "y"), dir("o/"), reg("o/old", "z"), dir("o/sub/"), reg("o/sub/f", "w")}
	tests := []struct {
		name  string
		upper []tar.Header
		want  []string
	}{
		{"whiteout a file", []tar.Header{reg("a/.wh.gone", "")}, []string{"a", "a/kept", "o", "o/old", "o/sub", "o/sub/f"}},
		{"whiteout a directory", []tar.Header{reg("o/.wh.sub", "")}, []string{"a", "a/gone", "a/kept", "o", "o/old"}},
		{"opaque keeps this layer's files", []tar.Header{dir("o/"), reg("o/new/n", "n"), reg("o/.wh..wh..opq", "")}, []string{"a", "a/gone", "a/kept", "o", "o/new", "o/new/n"}},
		{"whiteout of a missing name", []tar.Header{reg("nowhere/.wh.x", ""), reg("a/.wh.none", "")}, []string{"a", "a/gone", "a/kept", "o", "o/old", "o/sub", "o/sub/f"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := t.TempDir()
			root, _ := os.OpenRoot(d)
			defer root.Close()
			o := TarOptions{Whiteouts: true}
			if _, err := ExtractTarOptions(context.Background(), root, layerTar(t, lower), o); err != nil {
				t.Fatal(err)
			}
			if _, err := ExtractTarOptions(context.Background(), root, layerTar(t, tt.upper), o); err != nil {
				t.Fatal(err)
			}
			if got := files(t, d); !slices.Equal(got, tt.want) {
				t.Errorf("files %v, want %v", got, tt.want)
			}
		})
	}
}

// TestExtractWhiteoutOfParent refuses whiteouts that name no sibling
// (".wh..." would be the entry's own parent) and removes nothing for them.
// The fuzzer found ".wh..." (testdata/fuzz/FuzzExtractTarEntries).
func TestExtractWhiteoutOfParent(t *testing.T) {
	for _, name := range []string{"a/sub/.wh...", "a/.wh..", "a/.wh."} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			root, _ := os.OpenRoot(d)
			defer root.Close()
			o := TarOptions{Whiteouts: true}
			lower := []tar.Header{{Name: "a/sub/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "a/f", Typeflag: tar.TypeReg, Linkname: "x"}}
			if _, err := ExtractTarOptions(context.Background(), root, layerTar(t, lower), o); err != nil {
				t.Fatal(err)
			}
			upper := []tar.Header{{Name: name, Typeflag: tar.TypeReg}}
			_, err := ExtractTarOptions(context.Background(), root, layerTar(t, upper), o)
			var te *TarEntryError
			if !errors.As(err, &te) {
				t.Errorf("err %v, want a TarEntryError", err)
			}
			if got, want := files(t, d), []string{"a", "a/f", "a/sub"}; !slices.Equal(got, want) {
				t.Errorf("files %v, want %v", got, want)
			}
		})
	}
}

// TestExtractKeepOwners gives entries their headers' owners and modes.
func TestExtractKeepOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	d := t.TempDir()
	root, _ := os.OpenRoot(d)
	defer root.Close()
	hdrs := []tar.Header{
		{Name: "home/u/", Typeflag: tar.TypeDir, Mode: 0o750, Uid: 1000, Gid: 1000},
		{Name: "home/u/run", Typeflag: tar.TypeReg, Mode: 0o755, Uid: 1000, Gid: 100, Linkname: "#!/bin/sh\n"},
		{Name: "home/u/l", Typeflag: tar.TypeSymlink, Linkname: "run", Uid: 1000, Gid: 1000},
		{Name: "home/u/x", Typeflag: tar.TypeReg, Linkname: "x", Format: tar.FormatPAX,
			PAXRecords: map[string]string{"SCHILY.xattr.user.cove": "yes"}},
	}
	var counts LayerCounts
	if _, err := ExtractTarOptions(context.Background(), root, layerTar(t, hdrs), TarOptions{KeepOwners: true, Xattrs: true, Counts: &counts}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(filepath.Join(d, "home/u/x"), "user.cove", buf); counts.XattrsSkipped == 0 && (err != nil || string(buf[:n]) != "yes") {
		t.Errorf("xattr user.cove: %q %v", buf[:n], err)
	}
	for _, c := range []struct {
		name     string
		uid, gid uint32
		mode     os.FileMode
	}{{"home/u", 1000, 1000, os.ModeDir | 0o750}, {"home/u/run", 1000, 100, 0o755}} {
		fi, err := os.Lstat(filepath.Join(d, c.name))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != c.uid || st.Gid != c.gid || fi.Mode() != c.mode {
			t.Errorf("%s: %d:%d %v, want %d:%d %v", c.name, st.Uid, st.Gid, fi.Mode(), c.uid, c.gid, c.mode)
		}
	}
}

// TestExtractMaxBytes stops at the size limit.
func TestExtractMaxBytes(t *testing.T) {
	root, _ := os.OpenRoot(t.TempDir())
	defer root.Close()
	hdrs := []tar.Header{{Name: "a", Typeflag: tar.TypeReg, Linkname: "0123456789"}, {Name: "b", Typeflag: tar.TypeReg, Linkname: "0123456789"}}
	_, err := ExtractTarOptions(context.Background(), root, layerTar(t, hdrs), TarOptions{MaxBytes: 15})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v, want ErrTooLarge", err)
	}
}

// TestExtractRootName keeps the host path out of a refusal.
func TestExtractRootName(t *testing.T) {
	d := t.TempDir()
	root, _ := os.OpenRoot(d)
	defer root.Close()
	hdrs := []tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/"}, {Name: "l/x", Typeflag: tar.TypeReg}}
	_, err := ExtractTarOptions(context.Background(), root, layerTar(t, hdrs), TarOptions{RootName: "the image"})
	var te *TarEntryError
	if !errors.As(err, &te) || bytes.Contains([]byte(err.Error()), []byte(d)) {
		t.Fatalf("err %v", err)
	}
}
