package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/internal/mount"
)

// tmpPrefix marks work in progress. Anything under an image directory (or
// its base/) named so is garbage once the build lock is held.
const tmpPrefix = fsutil.TempPrefix

// lockDir takes an exclusive flock on dir/.lock, waiting until ctx is done.
// The lock dies with the process, so a killed build never wedges the next.
func lockDir(ctx context.Context, dir string, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if !told && waiting != nil {
			waiting()
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// removeStale removes the leftovers of interrupted builds in dir. Call it
// only with the build lock held.
func removeStale(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			errs = append(errs, removeTree(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// removeTree removes a build's leftovers without following a mount a
// killed build left in them into the host's files.
func removeTree(path string) error { return mount.RemoveAll(path) }

// treeSize is the apparent size of the files under root, hard links
// counted once.
func treeSize(root string) (int64, error) {
	type ino struct{ dev, ino uint64 }
	seen := map[ino]bool{}
	var total int64
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 && !d.IsDir() {
			k := ino{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		if info.Mode().IsRegular() || info.Mode()&fs.ModeSymlink != 0 {
			total += info.Size()
		}
		return nil
	})
	return total, err
}
