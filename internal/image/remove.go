package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cove-sandbox/cove/internal/fsutil"
)

// IDsOf returns the ids of the images nameOrID stands for: every image of
// that name if it is one (with a current pointer or images), else the
// image with that id.
func IDsOf(dir, nameOrID string) ([]string, error) {
	if err := checkName(nameOrID); err != nil {
		return nil, err
	}
	imgs, err := List(dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, img := range imgs {
		if img.Name == nameOrID {
			ids = append(ids, img.ID)
		}
	}
	if len(ids) > 0 {
		return ids, nil
	}
	if _, err := load(dir, nameOrID); err != nil {
		return nil, fmt.Errorf("image %q: %w", nameOrID, ErrNotFound)
	}
	return []string{nameOrID}, nil
}

// RemoveName removes name: its current pointer and all its images; or, if
// name is an image's id, that image (as Remove, which refuses a current
// one). It returns the ids removed. The caller checks that no sandbox or
// snapshot uses them.
func RemoveName(ctx context.Context, dir, name string) ([]string, error) {
	ids, err := IDsOf(dir, name)
	if err != nil {
		return nil, err
	}
	if len(ids) == 1 && ids[0] == name {
		if err := Remove(ctx, dir, name); err != nil {
			return nil, scrubPath(err, dir)
		}
		return ids, nil
	}
	unlock, err := lockDir(ctx, dir, nil)
	if err != nil {
		return nil, scrubPath(err, dir)
	}
	defer unlock()
	// The pointer first: a half-removed name is never resolved.
	if err := os.Remove(currentPath(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, scrubPath(fmt.Errorf("remove %s: %w", name, err), dir)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return nil, err
	}
	var removed []string
	for _, id := range ids {
		img, err := load(dir, id)
		if err != nil {
			continue // gone meanwhile
		}
		tmp := filepath.Join(dir, tmpPrefix+"rm-"+id)
		if err := os.Rename(img.Dir, tmp); err != nil {
			return removed, scrubPath(fmt.Errorf("remove %s: %w", id, err), dir)
		}
		if err := removeTree(tmp); err != nil {
			return removed, scrubPath(fmt.Errorf("remove %s: %w", id, err), dir)
		}
		removed = append(removed, id)
	}
	return removed, nil
}

// CleanStale removes what killed builds and imports left in dir (their
// .tmp- directories), unless a build or import holds the store's lock
// now: then that one cleans up when it is done. The daemon calls it at
// start, so that a SIGKILL during an import leaks nothing for long.
func CleanStale(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, ".lock")); err != nil {
		return nil // no build ever ran here
	}
	now, cancel := context.WithCancel(context.Background())
	cancel() // one try, no waiting
	unlock, err := lockDir(now, dir, nil)
	if err != nil {
		return nil // held: its holder removes the leftovers
	}
	defer unlock()
	return errors.Join(removeStale(dir), removeStale(filepath.Join(dir, "base")), removeDeadSpools(dir))
}
