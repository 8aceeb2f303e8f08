package image

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// tmpPrefix marks work in progress. Anything under an image directory (or
// its base/) named so is garbage once the build lock is held.
const tmpPrefix = ".tmp-"

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

// removeTree is os.RemoveAll that first detaches any mount at or below
// path. A build killed mid-debootstrap leaves proc, sysfs or even a bind
// of the host's /dev mounted in its rootfs, and RemoveAll would otherwise
// descend into them and delete the host's files.
func removeTree(path string) error {
	if err := unmountUnder(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	mounts, err := mountsUnder(path)
	if err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if len(mounts) > 0 {
		return fmt.Errorf("remove %s: refusing, still mounted: %s", path, strings.Join(mounts, ", "))
	}
	return os.RemoveAll(path)
}

// unmountUnder lazily unmounts everything mounted at or below path,
// deepest first.
func unmountUnder(path string) error {
	mounts, err := mountsUnder(path)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points at or below path, deepest first.
func mountsUnder(path string) ([]string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	// mountinfo shows resolved paths.
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	} else if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts, err := parseMountinfo(f)
	if err != nil {
		return nil, err
	}
	var under []string
	for _, m := range mounts {
		if m == abs || strings.HasPrefix(m, abs+"/") {
			under = append(under, m)
		}
	}
	// Deepest first; repeated entries (stacked mounts) stay adjacent.
	slices.SortStableFunc(under, func(a, b string) int { return len(b) - len(a) })
	return under, nil
}

// parseMountinfo returns the mount points (field 5) of a mountinfo file.
func parseMountinfo(r io.Reader) ([]string, error) {
	var mps []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		mps = append(mps, unescapeMountinfo(f[4]))
	}
	return mps, sc.Err()
}

// unescapeMountinfo undoes the kernel's octal escaping (\040 for space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// writeFileAtomic replaces path with data: a reader sees the old content
// or the new, never a mix, and the new content is on disk before it shows.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, tmpPrefix+base+"-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

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
