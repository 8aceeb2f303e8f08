// Package mount finds and removes mounts below a directory, so that cleanup
// never descends through a mount into files that are not its own.
package mount

import (
	"bufio"
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
)

// Under lists the mount points at or below path, deepest first.
func Under(path string) ([]string, error) {
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

// UnmountUnder lazily unmounts everything mounted at or below path,
// deepest first.
func UnmountUnder(path string) error {
	mounts, err := Under(path)
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

// RemoveAll is os.RemoveAll that first detaches any mount at or below
// path, and refuses if one stays: a killed debootstrap or runsc can leave
// proc, sysfs, or a bind of a host directory behind, and RemoveAll would
// otherwise delete the host's files through it.
func RemoveAll(path string) error {
	if err := UnmountUnder(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	mounts, err := Under(path)
	if err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if len(mounts) > 0 {
		return fmt.Errorf("remove %s: refusing, still mounted: %s", path, strings.Join(mounts, ", "))
	}
	return os.RemoveAll(path)
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
		mps = append(mps, unescape(f[4]))
	}
	return mps, sc.Err()
}

// unescape undoes the kernel's octal escaping (\040 for space).
func unescape(s string) string {
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
