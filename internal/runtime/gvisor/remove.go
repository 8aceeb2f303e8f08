package gvisor

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/mount"
)

// removeTree removes dir and what it holds. mount.RemoveAll detaches any
// mount below first, but reads the host's whole mount table to find them,
// which costs as much as there are sandboxes (two namespace mounts each):
// a tree in which statx marks no entry as a mount's root is removed
// without it. A tree holding a mount, or a kernel that does not say, goes
// through mount.RemoveAll.
func removeTree(dir string) error {
	if mounted, err := holdsMount(dir); err != nil || mounted {
		return mount.RemoveAll(dir)
	}
	return os.RemoveAll(dir)
}

// holdsMount reports whether dir or anything below it is the root of a
// mount; an error when statx cannot tell. A missing dir holds none.
func holdsMount(dir string) (bool, error) {
	found := false
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		var st unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, 0, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
			return errors.New("statx does not tell mount roots")
		}
		if st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
			found = true
			return fs.SkipAll
		}
		return nil
	})
	return found, err
}
