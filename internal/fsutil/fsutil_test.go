package fsutil

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for _, content := range []string{"one", "two, longer", ""} {
		if err := WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != content {
			t.Fatalf("read %q, %v; want %q", b, err, content)
		}
		st, _ := os.Stat(p)
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v", st.Mode())
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
	if err := WriteFile(filepath.Join(dir, "no", "such"), nil, 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

func TestWriteFromKeepsOldOnError(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	WriteFile(p, []byte("old"), 0o644)
	if _, err := WriteFrom(p, 0o644, failingReader{}); err == nil {
		t.Fatal("no error")
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("content %q after a failed write", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
}

func TestLinkOrCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.WriteFile(src, []byte("data"), 0o644)
	dst := filepath.Join(dir, "dst")
	if err := LinkOrCopy(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	a, _ := os.Stat(src)
	b, _ := os.Stat(dst)
	if !os.SameFile(a, b) {
		t.Fatal("not a hard link on one filesystem")
	}
	if err := LinkOrCopy(context.Background(), src, dst); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("over an existing file: %v, want ErrExist", err)
	}
	// /dev/shm is another filesystem than the test's temporary directory on
	// most hosts; where it is the same, this checks the link again.
	shm, err := os.MkdirTemp("/dev/shm", "fsutil-")
	if err != nil {
		t.Skip("no /dev/shm")
	}
	defer os.RemoveAll(shm)
	far := filepath.Join(shm, "far")
	if err := LinkOrCopy(context.Background(), src, far); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(far); string(got) != "data" {
		t.Fatalf("copy holds %q", got)
	}
}

func TestTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	os.WriteFile(p, []byte(strings.Repeat("x", 100)+"\nlast line\n"), 0o644)
	for _, tc := range []struct {
		n    int
		want string
	}{
		{10, "last line"},
		{1000, strings.Repeat("x", 100) + "\nlast line"},
	} {
		if got := Tail(p, tc.n); got != tc.want {
			t.Errorf("Tail(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := Tail(filepath.Join(t.TempDir(), "none"), 10); got != "" {
		t.Errorf("Tail of a missing file = %q", got)
	}
}

func TestSync(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	os.WriteFile(f, []byte("x"), 0o644)
	for _, tc := range []struct {
		path    string
		wantErr bool
	}{
		{f, false},
		{dir, false},
		{filepath.Join(dir, "none"), true},
	} {
		if err := Sync(tc.path); (err != nil) != tc.wantErr {
			t.Errorf("Sync(%s) = %v, want error %v", tc.path, err, tc.wantErr)
		}
	}
}
