package fsutil

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The fuzz targets extract into root, a directory beside outside, which
// holds one file: after any archive, outside and its file are as they
// were, and root holds nothing that is not inside it.

const sentinel = "outside/secret"

// fuzzDirs makes the directories and the lower layer an extraction starts
// from: keep/file, which only an entry naming keep may touch.
func fuzzDirs(t *testing.T) (base string, root *os.Root) {
	base = t.TempDir()
	for _, d := range []string{"root/keep", "outside"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{sentinel, "root/keep/file"} {
		if err := os.WriteFile(filepath.Join(base, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(filepath.Join(base, "root"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return base, root
}

// checkConfined fails t if anything beside root changed.
func checkConfined(t *testing.T, base string) {
	t.Helper()
	var names []string
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		if rel == "root" {
			return filepath.SkipDir
		}
		names = append(names, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{".", "outside", sentinel}; !slices.Equal(names, want) {
		t.Fatalf("outside root: %q, want %q", names, want)
	}
	fi, err := os.Lstat(filepath.Join(base, sentinel))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 || fi.Size() != 1 {
		t.Fatalf("%s changed: %v, %v", sentinel, fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(base, sentinel)); string(b) != "x" {
		t.Fatalf("%s now holds %q", sentinel, b)
	}
	if fi, err := os.Stat(filepath.Join(base, "root")); err != nil || !fi.IsDir() {
		t.Fatalf("root is gone: %v, %v", fi, err)
	}
}

// tarOptions picks the layer options from the bits of b.
func tarOptions(b byte) TarOptions {
	o := TarOptions{Whiteouts: b&1 != 0, KeepOwners: b&2 != 0, Xattrs: b&4 != 0}
	if b&8 != 0 {
		o.MaxBytes = int64(b >> 4)
	}
	return o
}

type fuzzEntry struct {
	name, link string
	typ        byte
	body       string
}

func buildTar(t testing.TB, entries ...fuzzEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o755, Format: tar.FormatPAX,
			PAXRecords: map[string]string{"SCHILY.xattr.user.fuzz": "v"}}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil // a name tar cannot hold: no archive
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// FuzzExtractTar extracts arbitrary bytes as a tar stream, with any of the
// layer options: no panic, and nothing written outside root.
func FuzzExtractTar(f *testing.F) {
	seeds := [][]fuzzEntry{
		{{name: "a/b/f", typ: tar.TypeReg, body: "hi"}, {name: "a/l", link: "b/f", typ: tar.TypeSymlink}},
		{{name: "esc", link: "../outside", typ: tar.TypeSymlink}, {name: "esc/secret", typ: tar.TypeReg, body: "pwned"}},
		{{name: "h", link: "../outside/secret", typ: tar.TypeLink}},
		{{name: "up", link: "..", typ: tar.TypeSymlink}, {name: "h", link: "up/outside/secret", typ: tar.TypeLink}},
		{{name: "keep/.wh.file", typ: tar.TypeReg}, {name: ".wh..wh..opq", typ: tar.TypeReg}},
		{{name: "../x", typ: tar.TypeReg}},
		{{name: "/abs", typ: tar.TypeReg}},
		{{name: ".", typ: tar.TypeDir}, {name: "d/", typ: tar.TypeDir}},
	}
	for i, s := range seeds {
		// Without the end blocks and padding (the reader takes a stream
		// that just stops): small seeds are mutated and minimized fast.
		a := buildTar(f, s...)
		end := len(bytes.TrimRight(a, "\x00"))
		f.Add(byte(i), a[:min(len(a), (end+511)/512*512)])
	}
	f.Fuzz(func(t *testing.T, opts byte, archive []byte) {
		base, root := fuzzDirs(t)
		ExtractTarOptions(context.Background(), root, bytes.NewReader(archive), tarOptions(opts))
		checkConfined(t, base)
	})
}

// FuzzExtractTarEntries builds the archive from fuzzed names, link targets
// and types, which reach the path checks far more often than mutated tar
// bytes do. Beyond FuzzExtractTar, keep/file (the lower layer) survives
// unless an entry names keep or whites out or hides it, and MaxBytes holds.
func FuzzExtractTarEntries(f *testing.F) {
	f.Add(byte(0), "a/b", byte(tar.TypeReg), "", "a/c", byte(tar.TypeSymlink), "b")
	f.Add(byte(1), "b", byte(tar.TypeDir), "", "b/.wh...", byte(tar.TypeReg), "")
	f.Add(byte(1), "x/.wh..wh..opq", byte(tar.TypeReg), "", ".wh.keep", byte(tar.TypeReg), "")
	f.Add(byte(0), "l", byte(tar.TypeSymlink), "../outside", "l/secret", byte(tar.TypeReg), "")
	f.Add(byte(0), "l", byte(tar.TypeSymlink), "/", "h", byte(tar.TypeLink), "l/etc/passwd")
	f.Add(byte(0), "k", byte(tar.TypeSymlink), "keep", "k/file", byte(tar.TypeReg), "")
	f.Add(byte(0x19), "big", byte(tar.TypeReg), "", "big2", byte(tar.TypeReg), "")
	f.Fuzz(func(t *testing.T, opts byte, name1 string, typ1 byte, link1, name2 string, typ2 byte, link2 string) {
		archive := buildTar(t,
			fuzzEntry{name: name1, typ: typ1, link: link1, body: "content"},
			fuzzEntry{name: name2, typ: typ2, link: link2, body: "more"})
		if archive == nil {
			return
		}
		base, root := fuzzDirs(t)
		o := tarOptions(opts)
		st, err := ExtractTarOptions(context.Background(), root, bytes.NewReader(archive), o)
		checkConfined(t, base)
		if o.MaxBytes > 0 && st.Bytes > o.MaxBytes+1 {
			t.Fatalf("wrote %d bytes of content, limit %d (err %v)", st.Bytes, o.MaxBytes, err)
		}
		if touchesKeep(name1, o) || touchesKeep(name2, o) {
			return
		}
		if b, rerr := os.ReadFile(filepath.Join(base, "root/keep/file")); rerr != nil || string(b) != "x" {
			t.Fatalf("keep/file, which no entry names, is %q, %v (extract: %v)", b, rerr, err)
		}
	})
}

// touchesKeep reports whether the entry called name may rightly change
// keep/file: it names keep, keep/file or something under it, or (with
// whiteouts) it whites out or hides keep or keep/file. A whiteout deletes
// a sibling of its own, nothing else.
func touchesKeep(name string, o TarOptions) bool {
	clean := path.Clean(name)
	if clean == "keep" || clean == "keep/file" || strings.HasPrefix(clean, "keep/file/") {
		return true
	}
	if !o.Whiteouts {
		// A non-whiteout entry under keep is a new file beside keep/file.
		return false
	}
	switch clean {
	case whiteoutOpaque, whiteoutPrefix + "keep", "keep/" + whiteoutOpaque, "keep/" + whiteoutPrefix + "file":
		return true
	}
	return false
}
