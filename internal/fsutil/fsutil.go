// Package fsutil holds the daemon's and CLI's file helpers: atomic writes,
// hard links that fall back to a sparse copy, and the tail of a log.
package fsutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// TempPrefix starts the name of every temporary file WriteFile and
// WriteFrom make, so that a sweep after a crash can find them.
const TempPrefix = ".tmp-"

// WriteFile replaces path with data: a reader sees the old content or the
// new, never a mix, and the new content is on disk before it shows.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	_, err := WriteFrom(path, perm, bytes.NewReader(data))
	return err
}

// WriteFrom is WriteFile with the content read from r; it returns the
// number of bytes written. On error path is untouched.
func WriteFrom(path string, perm fs.FileMode, r io.Reader) (int64, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, TempPrefix+base+"-")
	if err != nil {
		return 0, err
	}
	tmp := f.Name()
	// A 1 MiB buffer: large files make fewer syscalls than with io.Copy's
	// 32 KiB. Hiding the other methods keeps io.CopyBuffer from bypassing it.
	n, err := io.CopyBuffer(struct{ io.Writer }{f}, struct{ io.Reader }{r}, make([]byte, 1<<20))
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = SyncDir(dir)
	}
	if err != nil {
		os.Remove(tmp)
		return n, fmt.Errorf("write %s: %w", path, err)
	}
	return n, nil
}

// SyncDir flushes directory dir, so that a rename into it survives a crash.
func SyncDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	return Sync(dir)
}

// Sync flushes the file (or directory) at path to disk.
func Sync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// LinkOrCopy hard-links src to dst, or copies it (keeping holes, so a
// sparse RAM file stays sparse) where a link cannot be made, as across
// filesystems. An existing dst is an error either way.
func LinkOrCopy(ctx context.Context, src, dst string) error {
	err := os.Link(src, dst)
	if err == nil || errors.Is(err, fs.ErrExist) {
		return err
	}
	if !errors.Is(err, syscall.EXDEV) && !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EMLINK) {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "cp", "--sparse=always", "--no-clobber", "--", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s: %w: %s", src, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Tail returns the last n bytes of the file at path, trimmed, for an error
// message; "" if it cannot be read.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > int64(n) {
		f.Seek(st.Size()-int64(n), io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, int64(n)))
	return strings.TrimSpace(string(b))
}
