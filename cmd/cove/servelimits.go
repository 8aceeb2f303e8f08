package main

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/sandbox"
)

// resolveLimits checks serve's flags for the sandboxes' disk, process and
// file limits, and fills in the memory budget's default: the host's
// memory times --memory-overcommit.
func (f *serveFlags) resolveLimits() error {
	for _, l := range []struct {
		name          string
		def, max, min int
	}{
		{"disk-mib", f.defaultDisk, f.maxDisk, sandbox.MinDiskMiB},
		{"pids", f.defaultPids, f.maxPids, sandbox.MinPids},
	} {
		if l.def < l.min || l.def > l.max {
			return fmt.Errorf("--default-%s must be between %d and --max-%s (%d), got %d", l.name, l.min, l.name, l.max, l.def)
		}
	}
	if f.openFiles < sandbox.MinOpenFiles {
		return fmt.Errorf("--open-files must be at least %d, got %d", sandbox.MinOpenFiles, f.openFiles)
	}
	switch {
	case f.memBudget < 0:
		return fmt.Errorf("--memory-budget-mib must not be negative, got %d", f.memBudget)
	case f.memBudget > 0:
		return nil
	case f.overcommit <= 0:
		return fmt.Errorf("--memory-overcommit must be positive, got %g", f.overcommit)
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return fmt.Errorf("host memory: %w", err)
	}
	f.memBudget = int(float64(si.Totalram*uint64(si.Unit)>>20) * f.overcommit)
	return nil
}
