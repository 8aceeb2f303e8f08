package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// tarOf builds a tar stream of hdrs; a regular file's content is its name.
func tarOf(t *testing.T, hdrs ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Name))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(h.Name))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestTarRoundTrip extracts a tree of each kind of entry, then downloads
// it and extracts that elsewhere: the same tree, modes and times.
func TestTarRoundTrip(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	mtime := time.Unix(1_600_000_000, 0)
	stream := tarOf(t,
		tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o750, ModTime: mtime},
		tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o755, ModTime: mtime},
		tar.Header{Name: "deep/er/g", Typeflag: tar.TypeReg, ModTime: mtime},
		tar.Header{Name: "d/link", Typeflag: tar.TypeSymlink, Linkname: "f"},
		tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
		tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "d/f"},
		tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3},
	)
	res, err := e.c.TarPut(ctx, agentproto.TarPutRequest{Path: "up"}, bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	want := agentproto.TarResult{Files: 2, Dirs: 3, Symlinks: 2, Links: 1, Skipped: 1, Bytes: int64(len("d/f") + len("deep/er/g"))}
	if res != want {
		t.Errorf("result %+v, want %+v", res, want)
	}
	up := filepath.Join(e.dir, "up")
	fi, err := os.Stat(filepath.Join(up, "d", "f"))
	if err != nil || fi.Mode().Perm() != 0o755 || !fi.ModTime().Equal(mtime) {
		t.Errorf("d/f: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(up, "d")); err != nil || fi.Mode().Perm() != 0o750 || !fi.ModTime().Equal(mtime) {
		t.Errorf("d: %v %v", fi, err)
	}
	if l, _ := os.Readlink(filepath.Join(up, "out")); l != "/etc" {
		t.Errorf("out -> %q", l)
	}

	rc, err := e.c.TarGet(ctx, agentproto.TarGetRequest{Path: "up"})
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(back))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, string(h.Typeflag)+":"+h.Name+">"+h.Linkname)
	}
	if got, want := strings.Join(names, " "), "5:d/> 0:d/f> 2:d/link>f 5:deep/> 5:deep/er/> 0:deep/er/g> 1:hard>d/f 2:out>/etc"; got != want {
		t.Errorf("download:\n got %s\nwant %s", got, want)
	}
	if _, err := e.c.TarPut(ctx, agentproto.TarPutRequest{Path: "copy"}, bytes.NewReader(back)); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(e.dir, "copy", "hard")); err != nil || string(b) != "d/f" {
		t.Errorf("copy/hard = %q, %v", b, err)
	}
}

// TestTarRefused checks that entries reaching outside the directory are
// refused by name and write nothing there.
func TestTarRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdrs []tar.Header
		want string
	}{
		{"dotdot", []tar.Header{{Name: "../x", Typeflag: tar.TypeReg}}, `"../x" has a '..'`},
		{"absolute", []tar.Header{{Name: "/x", Typeflag: tar.TypeReg}}, `"/x" has an absolute name`},
		{"through symlink", []tar.Header{
			{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "OUTSIDE"},
			{Name: "link/x", Typeflag: tar.TypeReg},
		}, `"link/x"`},
		{"through relative symlink", []tar.Header{
			{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../.."},
			{Name: "up/x", Typeflag: tar.TypeReg},
		}, `"up/x"`},
		{"hard link out", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../outside/x"}}, "outside the directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			outside := filepath.Join(filepath.Dir(e.dir), "outside")
			os.MkdirAll(outside, 0o755)
			for i := range tc.hdrs {
				tc.hdrs[i].Linkname = strings.ReplaceAll(tc.hdrs[i].Linkname, "OUTSIDE", outside)
			}
			_, err := e.c.TarPut(context.Background(), agentproto.TarPutRequest{Path: "t/in"}, bytes.NewReader(tarOf(t, tc.hdrs...)))
			if agentproto.CodeOf(err) != agentproto.CodeInvalid || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want code invalid naming %s", err, tc.want)
			}
			for _, p := range []string{filepath.Join(outside, "x"), filepath.Join(e.dir, "x"), filepath.Join(e.dir, "t", "x"), filepath.Join(filepath.Dir(e.dir), "x")} {
				if exists(p) {
					t.Errorf("%s was written", p)
				}
			}
		})
	}
}

// A file entry over a symlink replaces the link rather than writing
// through it.
func TestTarReplacesSymlink(t *testing.T) {
	e := newTestEnv(t)
	outside := filepath.Join(filepath.Dir(e.dir), "secret")
	os.WriteFile(outside, []byte("keep"), 0o644)
	stream := tarOf(t, tar.Header{Name: "s", Typeflag: tar.TypeSymlink, Linkname: outside}, tar.Header{Name: "s", Typeflag: tar.TypeReg})
	if _, err := e.c.TarPut(context.Background(), agentproto.TarPutRequest{Path: "d"}, bytes.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(e.dir, "d", "s")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("d/s: %v %v", fi, err)
	}
}

func TestTarBadTarget(t *testing.T) {
	e := newTestEnv(t)
	os.WriteFile(filepath.Join(e.dir, "file"), nil, 0o644)
	ctx := context.Background()
	if _, err := e.c.TarPut(ctx, agentproto.TarPutRequest{Path: "file"}, bytes.NewReader(tarOf(t))); agentproto.CodeOf(err) != agentproto.CodeInvalid {
		t.Errorf("TarPut onto a file: %v", err)
	}
	if _, err := e.c.TarGet(ctx, agentproto.TarGetRequest{Path: "missing"}); agentproto.CodeOf(err) != agentproto.CodeNotFound {
		t.Errorf("TarGet(missing): %v", err)
	}
	if _, err := e.c.TarGet(ctx, agentproto.TarGetRequest{Path: "file"}); agentproto.CodeOf(err) != agentproto.CodeInvalid {
		t.Errorf("TarGet(file): %v", err)
	}
	if _, err := e.c.TarPut(ctx, agentproto.TarPutRequest{Path: "d"}, strings.NewReader("not a tar stream at all, no")); agentproto.CodeOf(err) != agentproto.CodeInvalid {
		t.Errorf("TarPut(garbage): %v", err)
	}
}
