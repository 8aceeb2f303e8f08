package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cove-sandbox/cove/internal/proc"
)

// Procs returns the processes in the cgroup directories dirs (each one's
// cgroup.procs), each once; directories that are gone hold none.
func Procs(dirs ...string) ([]int, error) {
	var pids []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids, nil
}

// Kill kills every process in the cgroup directories dirs and waits for
// them to exit, then looks again, until a look finds none or ctx ends: a
// process forked between a look and its parent's death is in the cgroup
// too. Cgroup v2's cgroup.kill is written first where there is one, which
// no fork escapes. It reads only these cgroups, never the host's other
// processes, and says how many it signalled.
func Kill(ctx context.Context, dirs ...string) (int, error) {
	for _, d := range dirs {
		// Best effort: v1 has no such file, and the loop below kills
		// whatever this misses.
		os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0o644)
	}
	n := 0
	for {
		pids, err := Procs(dirs...)
		if err != nil || len(pids) == 0 {
			return n, err
		}
		// A pid is signalled only if, once held by a pidfd, it is still
		// in one of the cgroups: never one that exited and was reused.
		var now []int
		looked := false
		in := func(pid int) bool {
			if !looked {
				now, _ = Procs(dirs...)
				looked = true
			}
			return slices.Contains(now, pid)
		}
		k, err := proc.KillWait(ctx, pids, in)
		n += k
		if err != nil {
			return n, fmt.Errorf("cgroup: kill: %w", err)
		}
		if k == 0 {
			// Every pid listed had exited, or is a zombie its parent
			// (outside the cgroup) has yet to reap: not ours to wait for.
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			return n, nil
		}
	}
}
