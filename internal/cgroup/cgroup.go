// Package cgroup manages the cgroup directories the runtimes make per
// sandbox: where they are, raising a quota for a while, removing them.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Root is where the host mounts its cgroup hierarchies.
const Root = "/sys/fs/cgroup"

// parent holds every sandbox's cgroup, in each hierarchy.
const parent = "cove"

// CPUPeriod is the CFS period, in microseconds, the runtimes express a
// sandbox's CPU quota in: one CPU is a quota of one period.
const CPUPeriod = 100000

// V2 reports whether the host runs the unified (v2) hierarchy.
func V2() bool {
	_, err := os.Stat(filepath.Join(Root, "cgroup.controllers"))
	return err == nil
}

// Dir is sandbox id's cgroup directory under a v1 controller ("cpu",
// "memory", ...), or under the unified hierarchy for controller "".
func Dir(controller, id string) string { return filepath.Join(Root, controller, parent, id) }

// Dirs lists every directory that may hold sandbox id's cgroup: the
// unified one and one under each v1 controller that has it. Runtimes
// remove these at teardown whichever they made.
func Dirs(id string) []string { return dirsUnder(Root, id) }

// dirsUnder is Dirs for hierarchies mounted under root. It stats each
// controller's directory for id rather than globbing: a glob reads every
// sandbox's entry under each controller, which made each call cost as
// much as there were sandboxes.
func dirsUnder(root, id string) []string {
	var dirs []string
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		d := filepath.Join(root, e.Name(), parent, id)
		if _, err := os.Stat(d); err == nil {
			dirs = append(dirs, d)
		}
	}
	return append(dirs, filepath.Join(root, parent, id))
}

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

// RaiseCPUQuota adds one CPU to the CPU quota of each cgroup directory in
// dirs that has one (cgroup v2's cpu.max or v1's cpu.cfs_quota_us; others
// are skipped), for work done on a sandbox's behalf that would otherwise
// be throttled at the sandbox's own quota, such as a checkpoint. The
// returned func puts the quotas back.
func RaiseCPUQuota(dirs ...string) (restore func(), err error) {
	var undo [][2]string // file, its old content
	restore = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			os.WriteFile(undo[i][0], []byte(undo[i][1]), 0o644)
		}
	}
	seen := map[string]bool{}
	for _, d := range dirs {
		// v1 controllers mounted together (cpu,cpuacct) show one
		// directory under several names: raise it once.
		if real, err := filepath.EvalSymlinks(d); err == nil {
			if seen[real] {
				continue
			}
			seen[real] = true
		}
		f, raised, old, err := raisedQuota(d)
		if err != nil {
			restore()
			return func() {}, err
		}
		if f == "" {
			continue
		}
		if err := os.WriteFile(f, []byte(raised), 0o644); err != nil {
			restore()
			return func() {}, fmt.Errorf("cgroup: %w", err)
		}
		undo = append(undo, [2]string{f, old})
	}
	return restore, nil
}

// raisedQuota reads the CPU quota of cgroup directory d and returns its
// file, the content that adds one CPU to it, and its current content; ""
// when d has no quota to raise (no CPU controller, or no limit).
func raisedQuota(d string) (file, raised, old string, err error) {
	if b, err := os.ReadFile(filepath.Join(d, "cpu.max")); err == nil {
		old = strings.TrimSpace(string(b))
		quota, period, ok := strings.Cut(old, " ")
		q, qerr := strconv.Atoi(quota)
		p, perr := strconv.Atoi(period)
		if !ok || qerr != nil || perr != nil { // "max": no limit
			return "", "", "", nil
		}
		return filepath.Join(d, "cpu.max"), fmt.Sprintf("%d %d", q+p, p), old, nil
	}
	b, err := os.ReadFile(filepath.Join(d, "cpu.cfs_quota_us"))
	if err != nil {
		return "", "", "", nil // not a CPU controller's directory
	}
	old = strings.TrimSpace(string(b))
	q, err := strconv.Atoi(old)
	if err != nil || q < 0 {
		return "", "", "", nil
	}
	pb, err := os.ReadFile(filepath.Join(d, "cpu.cfs_period_us"))
	if err != nil {
		return "", "", "", fmt.Errorf("cgroup: %w", err)
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(pb)))
	if err != nil {
		return "", "", "", fmt.Errorf("cgroup: period %q: %w", pb, err)
	}
	return filepath.Join(d, "cpu.cfs_quota_us"), strconv.Itoa(q + p), old, nil
}

// OOMKills returns how many tasks the kernel's OOM killer has killed in
// the memory cgroups among dirs: the oom_kill count of cgroup v2's
// memory.events or of v1's memory.oom_control. Directories that have
// neither (not a memory controller's, or gone) count nothing.
func OOMKills(dirs ...string) int {
	n := 0
	for _, d := range dirs {
		for _, f := range []string{"memory.events", "memory.oom_control"} {
			b, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
					k, _ := strconv.Atoi(strings.TrimSpace(v))
					n += k
				}
			}
			break
		}
	}
	return n
}
