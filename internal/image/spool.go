package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// spoolPrefix names the directories uploads are spooled into. They are
// made outside the build lock, so that an upload is read while another
// import holds it (a body left unread that long would be cut as stalled);
// a flock of each one's own marks it live.
const spoolPrefix = ".spool-"

// newSpool makes a spool directory in dir; release removes it.
func newSpool(dir string) (path string, release func(), err error) {
	d, err := os.MkdirTemp(dir, spoolPrefix)
	if err != nil {
		return "", nil, err
	}
	f, err := os.OpenFile(filepath.Join(d, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		removeTree(d)
		return "", nil, fmt.Errorf("spool: %w", err)
	}
	return d, func() {
		removeTree(d) // before the flock goes: never seen dead while there
		f.Close()
	}, nil
}

// removeDeadSpools removes the spool directories no live import holds:
// those of imports that were killed.
func removeDeadSpools(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), spoolPrefix) {
			continue
		}
		d := filepath.Join(dir, e.Name())
		f, err := os.OpenFile(filepath.Join(d, ".lock"), os.O_RDWR, 0)
		if err == nil && syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue // live
		}
		errs = append(errs, removeTree(d))
		if f != nil {
			f.Close()
		}
	}
	return errors.Join(errs...)
}
