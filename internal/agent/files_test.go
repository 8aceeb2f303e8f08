package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

func TestPutGetRoundTrip(t *testing.T) {
	e := newTestEnv(t)
	tests := []struct {
		name     string
		path     string // relative to the work dir, or absolute
		size     int
		mode     uint32
		wantMode uint32
	}{
		{"default mode", "a.bin", 3<<20 + 17, 0, 0o644},
		{"executable, new parents", "x/y/z/run.sh", 1 << 20, 0o755, 0o755},
		{"private", "secret", 5 << 20, 0o600, 0o600},
		{"setuid kept", "suid", 10, 0o4755, 0o4755},
		{"empty", "empty", 0, 0, 0o644},
		{"absolute", filepath.Join(e.dir, "abs", "f"), 1000, 0o640, 0o640},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			data := make([]byte, tt.size)
			rand.Read(data)
			want := filepath.Join(e.dir, tt.path)
			if filepath.IsAbs(tt.path) {
				want = tt.path
			}
			info, err := e.c.Put(ctx, agentproto.PutRequest{Path: tt.path, Mode: tt.mode}, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if info.Path != want || info.Type != "file" || info.Size != int64(tt.size) || info.Mode != tt.wantMode {
				t.Errorf("put info = %+v; want path %s, size %d, mode %#o", info, want, tt.size, tt.wantMode)
			}
			fi, err := os.Stat(want)
			if err != nil {
				t.Fatal(err)
			}
			if got := permBits(fi.Mode()); got != tt.wantMode {
				t.Errorf("mode on disk %#o, want %#o", got, tt.wantMode)
			}

			info, rc, err := e.c.Get(ctx, agentproto.GetRequest{Path: tt.path})
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			h := sha256.New()
			n, err := io.Copy(h, rc)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(tt.size) || !bytes.Equal(h.Sum(nil), sha(data)) {
				t.Errorf("got %d bytes with another sha256; want %d", n, tt.size)
			}
			if info.Size != int64(tt.size) || info.Mode != tt.wantMode || info.Type != "file" {
				t.Errorf("get info = %+v", info)
			}
		})
	}
}

func sha(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// failingReader returns some data, then an error.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("source broke")
	}
	n := min(len(p), r.n)
	r.n -= n
	return n, nil
}

// TestPutAtomic checks that a put replaces a file whole, and that neither
// a finished nor a failed put leaves a temporary file behind.
func TestPutAtomic(t *testing.T) {
	e := newTestEnv(t)
	ctx := testCtx(t)
	target := filepath.Join(e.dir, "f")
	if _, err := e.c.Put(ctx, agentproto.PutRequest{Path: "f"}, strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Put(ctx, agentproto.PutRequest{Path: "f"}, strings.NewReader("new content")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "new content" {
		t.Errorf("content %q", b)
	}

	// The content is cut short: the old file must stay as it was.
	ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := e.c.Put(ctx2, agentproto.PutRequest{Path: "f"}, &failingReader{n: 1 << 20})
	if err == nil {
		t.Fatal("put from a failing reader succeeded")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("put from a failing reader hung until its context ended")
	}
	// The agent removes its temp file after answering; give it a moment.
	deadline := time.Now().Add(2 * time.Second)
	for {
		ents, _ := os.ReadDir(e.dir)
		var names []string
		for _, d := range ents {
			names = append(names, d.Name())
		}
		if slices.Equal(names, []string{"f"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("work dir holds %q, want only f", names)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if b, _ := os.ReadFile(target); string(b) != "new content" {
		t.Errorf("content after failed put %q", b)
	}
}

func TestPutErrors(t *testing.T) {
	e := newTestEnv(t)
	if err := os.MkdirAll(filepath.Join(e.dir, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  agentproto.PutRequest
		code string
	}{
		{"onto a directory", agentproto.PutRequest{Path: "dir"}, agentproto.CodeIsDir},
		{"onto the work dir", agentproto.PutRequest{Path: "."}, agentproto.CodeIsDir},
		{"under a file", agentproto.PutRequest{Path: "file/x"}, agentproto.CodeInvalid},
		{"bad mode", agentproto.PutRequest{Path: "m", Mode: 0o10000}, agentproto.CodeInvalid},
		{"empty path", agentproto.PutRequest{}, agentproto.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.c.Put(testCtx(t), tt.req, bytes.NewReader(make([]byte, 1<<20)))
			wantCode(t, err, tt.code)
		})
	}
	if fi, err := os.Stat(filepath.Join(e.dir, "dir")); err != nil || !fi.IsDir() {
		t.Errorf("directory was replaced: %v", err)
	}
}

func TestGetErrors(t *testing.T) {
	e := newTestEnv(t)
	if err := os.MkdirAll(filepath.Join(e.dir, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, code string
	}{
		{"missing", "nope", agentproto.CodeNotFound},
		{"missing absolute", filepath.Join(e.dir, "nope", "deeper"), agentproto.CodeNotFound},
		{"directory", "dir", agentproto.CodeIsDir},
		{"dotdot", "../etc/passwd", agentproto.CodeInvalid},
		{"device", "/dev/null", agentproto.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rc, err := e.c.Get(testCtx(t), agentproto.GetRequest{Path: tt.path})
			if rc != nil {
				rc.Close()
			}
			wantCode(t, err, tt.code)
		})
	}
}

func TestGetRange(t *testing.T) {
	e := newTestEnv(t)
	if err := os.WriteFile(filepath.Join(e.dir, "f"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		offset, length int64
		want, code     string
	}{
		{0, 0, "0123456789", ""},
		{3, 0, "3456789", ""},
		{3, 4, "3456", ""},
		{8, 100, "89", ""},
		{10, 0, "", ""},
		{11, 0, "", agentproto.CodeInvalid},
		{-1, 0, "", agentproto.CodeInvalid},
		{0, -5, "", agentproto.CodeInvalid},
	}
	for _, tt := range tests {
		info, rc, err := e.c.Get(testCtx(t), agentproto.GetRequest{Path: "f", Offset: tt.offset, Length: tt.length})
		if tt.code != "" {
			wantCode(t, err, tt.code)
			continue
		}
		if err != nil {
			t.Fatalf("offset %d length %d: %v", tt.offset, tt.length, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(b) != tt.want || info.Size != 10 {
			t.Errorf("offset %d length %d: %q (size %d), %v; want %q", tt.offset, tt.length, b, info.Size, err, tt.want)
		}
	}
}

func TestList(t *testing.T) {
	e := newTestEnv(t)
	mtime := time.Unix(1700000000, 0)
	for _, f := range []struct {
		path string
		data string
		mode os.FileMode
	}{
		{"b.txt", "hello", 0o644},
		{"a/x", "", 0o600},
		{"a/y/z", "zz", 0o755},
		{"a.txt", "", 0o644},
		{"c/", "", 0o750},
	} {
		p := filepath.Join(e.dir, f.path)
		if strings.HasSuffix(f.path, "/") {
			if err := os.Mkdir(p, f.mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(p, f.mode)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, f.mode)
		os.Chtimes(p, mtime, mtime)
	}
	if err := os.Symlink("a", filepath.Join(e.dir, "link")); err != nil {
		t.Fatal(err)
	}
	d := e.dir
	tests := []struct {
		name  string
		req   agentproto.ListRequest
		paths []string
	}{
		{"depth 0 means 1", agentproto.ListRequest{Path: "."}, []string{d + "/a", d + "/a.txt", d + "/b.txt", d + "/c", d + "/link"}},
		{"depth 1", agentproto.ListRequest{Path: d, Depth: 1}, []string{d + "/a", d + "/a.txt", d + "/b.txt", d + "/c", d + "/link"}},
		{"depth 2", agentproto.ListRequest{Path: ".", Depth: 2}, []string{d + "/a", d + "/a/x", d + "/a/y", d + "/a.txt", d + "/b.txt", d + "/c", d + "/link"}},
		{"depth 9", agentproto.ListRequest{Path: ".", Depth: 9}, []string{d + "/a", d + "/a/x", d + "/a/y", d + "/a/y/z", d + "/a.txt", d + "/b.txt", d + "/c", d + "/link"}},
		{"subdir", agentproto.ListRequest{Path: "a", Depth: 2}, []string{d + "/a/x", d + "/a/y", d + "/a/y/z"}},
		{"a file lists itself", agentproto.ListRequest{Path: "b.txt", Depth: 3}, []string{d + "/b.txt"}},
		{"empty dir", agentproto.ListRequest{Path: "c"}, []string{}},
		{"symlink named by the request is followed", agentproto.ListRequest{Path: "link"}, []string{d + "/link/x", d + "/link/y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := e.c.List(testCtx(t), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, fi := range r.Entries {
				got = append(got, fi.Path)
			}
			if !slices.Equal(got, tt.paths) || r.Truncated {
				t.Errorf("list = %q (truncated %v); want %q", got, r.Truncated, tt.paths)
			}
		})
	}

	r, err := e.c.List(testCtx(t), agentproto.ListRequest{Path: ".", Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]agentproto.FileInfo{}
	for _, fi := range r.Entries {
		byPath[fi.Path] = fi
	}
	wantInfo := []agentproto.FileInfo{
		{Path: d + "/b.txt", Type: "file", Size: 5, Mode: 0o644, MtimeUnix: mtime.Unix()},
		{Path: d + "/a/x", Type: "file", Size: 0, Mode: 0o600, MtimeUnix: mtime.Unix()},
		{Path: d + "/c", Type: "dir", Mode: 0o750},
		{Path: d + "/link", Type: "symlink", Mode: 0o777, Target: "a"},
	}
	for _, want := range wantInfo {
		got := byPath[want.Path]
		if want.Type == "dir" || want.Type == "symlink" {
			want.Size, want.MtimeUnix = got.Size, got.MtimeUnix
		}
		if got != want {
			t.Errorf("info %+v, want %+v", got, want)
		}
	}
}

func TestListErrors(t *testing.T) {
	e := newTestEnv(t)
	_, err := e.c.List(testCtx(t), agentproto.ListRequest{Path: "missing"})
	wantCode(t, err, agentproto.CodeNotFound)
	_, err = e.c.List(testCtx(t), agentproto.ListRequest{Path: ".", Depth: -1})
	wantCode(t, err, agentproto.CodeInvalid)
}

func TestListTruncated(t *testing.T) {
	e := newTestEnv(t)
	dir := filepath.Join(e.dir, "many")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range agentproto.MaxListEntries + 5 {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%06d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	r, err := e.c.List(testCtx(t), agentproto.ListRequest{Path: "many"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Truncated || len(r.Entries) != agentproto.MaxListEntries {
		t.Fatalf("got %d entries, truncated %v", len(r.Entries), r.Truncated)
	}
	if last := r.Entries[len(r.Entries)-1].Path; last != filepath.Join(dir, "f009999") {
		t.Errorf("last entry %s", last)
	}

	// Exactly at the cap is not truncated.
	for i := agentproto.MaxListEntries; i < agentproto.MaxListEntries+5; i++ {
		os.Remove(filepath.Join(dir, fmt.Sprintf("f%06d", i)))
	}
	r, err = e.c.List(testCtx(t), agentproto.ListRequest{Path: "many"})
	if err != nil || r.Truncated || len(r.Entries) != agentproto.MaxListEntries {
		t.Fatalf("at the cap: %d entries, truncated %v, %v", len(r.Entries), r.Truncated, err)
	}
}
