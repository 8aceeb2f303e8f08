package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Add creates the named namespace as ip netns add does, in this process
// rather than in an ip(8) of its own: a new namespace, unshared on a
// thread of its own and bind-mounted at Dir/ns, under a Dir that is a
// shared mount so that a namespace deleted is gone from mount namespaces
// made meanwhile (runsc's) too.
func Add(ctx context.Context, ns string) error {
	if ns == "" || ns == "." || ns == ".." || filepath.Base(ns) != ns {
		return fmt.Errorf("netns add: bad name %q", ns)
	}
	if err := sharedDir(); err != nil {
		return fmt.Errorf("netns add %s: %w", ns, err)
	}
	path := filepath.Join(Dir, ns)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0)
	if err != nil {
		return fmt.Errorf("netns add %s: %w", ns, err)
	}
	f.Close()
	err = onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		return nil
	}, func() error {
		return unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, "")
	})
	if err != nil {
		unix.Unmount(path, unix.MNT_DETACH)
		os.Remove(path)
		return fmt.Errorf("netns add %s: %w", ns, err)
	}
	return nil
}

// sharedDir makes Dir a shared mount, as ip(8) does: bound onto itself
// first if it is not a mount yet.
func sharedDir() error {
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if !errors.Is(err, unix.EINVAL) {
		return err
	}
	if err := unix.Mount(Dir, Dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", Dir, err)
	}
	return unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
}

// Delete deletes each named namespace that exists, as ip netns delete
// does but in this process: its mount is detached and its file removed.
// The namespace, and the links in it, go once nothing else holds it.
func Delete(ctx context.Context, names ...string) error {
	var errs []error
	for _, ns := range names {
		if ns == "" || filepath.Base(ns) != ns {
			errs = append(errs, fmt.Errorf("netns delete: bad name %q", ns))
			continue
		}
		path := filepath.Join(Dir, ns)
		if !Exists(ns) {
			continue
		}
		// EINVAL: not a mount (an Add cut short); the file goes anyway.
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("netns delete %s: %w", ns, err))
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("netns delete %s: %w", ns, err))
		}
	}
	return errors.Join(errs...)
}
