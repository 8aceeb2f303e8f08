package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cove-sandbox/cove/internal/cgroup"
)

// The VM's QEMU runs in a cgroup named like gVisor's sandboxes' (cove/<id>)
// with the sandbox's CPU quota and a memory limit of the guest's RAM plus
// QEMU's own overhead. The guest kernel enforces the guest's limit itself:
// a runaway process inside meets the guest's OOM killer, not the host's.
const memOverheadMiB = 384 // TCG translation cache, QEMU heap, page tables

// joinCgroup puts pid into the sandbox's cgroups, made with its limits:
// one in the unified hierarchy, or one under each v1 controller it sets.
func joinCgroup(id string, pid, cpus, memMiB int) error {
	mem := strconv.FormatInt(int64(memMiB+memOverheadMiB)<<20, 10)
	period := strconv.Itoa(cgroup.CPUPeriod)
	quota := strconv.Itoa(max(cpus, 1) * cgroup.CPUPeriod)
	controllers := []string{""}
	if !cgroup.V2() {
		controllers = []string{"cpu", "memory"}
	}
	var errs []error
	for _, c := range controllers {
		d := cgroup.Dir(c, id)
		if err := os.MkdirAll(d, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		var files [][2]string
		switch c {
		case "cpu":
			files = [][2]string{{"cpu.cfs_period_us", period}, {"cpu.cfs_quota_us", quota}}
		case "memory":
			files = [][2]string{{"memory.limit_in_bytes", mem}}
		default:
			files = [][2]string{{"cpu.max", quota + " " + period}, {"memory.max", mem}}
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(d, f[0]), []byte(f[1]), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("cgroup %s: %w", f[0], err))
			}
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
