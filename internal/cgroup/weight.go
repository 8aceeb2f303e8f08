package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// RaiseCPUWeight multiplies the CPU weight of each cgroup directory in
// dirs that has one (cgroup v2's cpu.weight, v1's cpu.shares; others are
// skipped) by factor, within the kernel's bounds, for work on a sandbox's
// behalf that competes with other sandboxes for the host's CPUs: a quota
// only caps a sandbox, while its weight is what wins it CPU time from busy
// neighbours. The returned func puts the weights back.
func RaiseCPUWeight(factor int, dirs ...string) (restore func(), err error) {
	var undo [][2]string // file, its old content
	restore = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			os.WriteFile(undo[i][0], []byte(undo[i][1]), 0o644)
		}
	}
	seen := map[string]bool{}
	for _, d := range dirs {
		if real, err := filepath.EvalSymlinks(d); err == nil {
			if seen[real] {
				continue
			}
			seen[real] = true
		}
		for _, w := range []struct {
			file     string
			min, max int
		}{{"cpu.weight", 1, 10000}, {"cpu.shares", 2, 262144}} {
			f := filepath.Join(d, w.file)
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			old := strings.TrimSpace(string(b))
			v, err := strconv.Atoi(old)
			if err != nil {
				restore()
				return func() {}, fmt.Errorf("cgroup: %s: %q: %w", f, old, err)
			}
			raised := min(max(v*factor, w.min), w.max)
			if err := os.WriteFile(f, []byte(strconv.Itoa(raised)), 0o644); err != nil {
				restore()
				return func() {}, fmt.Errorf("cgroup: %w", err)
			}
			undo = append(undo, [2]string{f, old})
		}
	}
	return restore, nil
}
