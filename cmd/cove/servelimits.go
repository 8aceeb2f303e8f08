package main

import (
	"fmt"

	"github.com/cove-sandbox/cove/internal/hostres"

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

// hostCost is what one more idle sandbox of a backend takes of the host,
// by the density benchmark (cove bench --density): an idle gVisor sandbox's
// processes hold about 30 MiB and 60 threads, a QEMU clone its guest's
// touched memory and a dozen threads.
func hostCost(backend string) hostres.Cost {
	if backend == "qemu" {
		return hostres.Cost{MemoryMiB: 48, Tasks: 16}
	}
	return hostres.Cost{MemoryMiB: 32, Tasks: 64}
}

// resolveHostLimits fills in the defaults that follow the host's size: the
// memory floor (5% of it, at least 1 GiB) and the sandbox cap (as many
// idle sandboxes as its memory holds at cost each).
func (f *serveFlags) resolveHostLimits(cost hostres.Cost) error {
	if f.maxSandboxes < 0 {
		return fmt.Errorf("--max-sandboxes must not be negative, got %d", f.maxSandboxes)
	}
	if f.hostFloor < -1 {
		return fmt.Errorf("--host-memory-floor-mib must be -1 (auto), 0 (none) or positive, got %d", f.hostFloor)
	}
	if f.maxSandboxes > 0 && f.hostFloor >= 0 {
		return nil
	}
	r, err := hostres.Read()
	if err != nil {
		return fmt.Errorf("host memory: %w", err)
	}
	if f.hostFloor < 0 {
		f.hostFloor = max(1024, r.MemTotalMiB/20)
	}
	if f.maxSandboxes == 0 {
		f.maxSandboxes = max(1, int(r.MemTotalMiB/cost.MemoryMiB))
	}
	return nil
}
