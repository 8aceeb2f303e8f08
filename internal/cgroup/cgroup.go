// Package cgroup removes the cgroup directories the runtimes make per
// sandbox.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// Remove removes each cgroup directory in dirs that exists. A cgroup
// refuses removal while a task in it is still exiting (a sandbox just
// killed), so each removal is retried for up to a second.
func Remove(dirs ...string) error {
	var errs []error
	for _, d := range dirs {
		var err error
		for range 50 {
			if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}
