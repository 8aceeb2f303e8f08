package bench

// Fan-out as the host fills: spawning N children from empty and again
// with M others running, what each child costs the host's CPU, and
// deleting all of them at the end.

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// manyMemoryMiB is the memory of the sandboxes the fan-out and density
// benchmarks hold by the hundred: idle, they use a fraction of it, and
// the daemon's memory budget counts limits.
const manyMemoryMiB = 128

// heldChunk is how many held sandboxes one spawn call asks for.
const heldChunk = 100

// benchSpawnWith times spawning n children from a snapshot of its own
// from empty, then again with m others running, and then deleting all
// n+m of them as cove kill does.
func (s *snapBench) benchSpawnWith(ctx context.Context, n, m int) []result {
	name := fmt.Sprintf("spawn_%d_with_%d", n, m)
	ratioName, cpuName, killName := name+"_vs_0", fmt.Sprintf("cpu_per_child_%d_with_%d", n, m), fmt.Sprintf("kill_%d", n+m)
	failAll := func(err error) []result {
		return []result{failedResult(name, unitMs, err), failedResult(ratioName, unitRatio, err),
			failedResult(cpuName, unitSeconds, err), failedResult(killName, unitMs, err)}
	}
	tag := s.prefix + "-many"
	s.cu.addSnapshot(tag)
	if _, err := s.build(ctx, tag, 0, manyMemoryMiB); err != nil {
		return failAll(err)
	}
	defer s.cu.deleteSnapshot(ctx, tag)

	sbs, empty, err := s.spawn(ctx, tag, n)
	s.cu.destroyAll(ctx, ids(sbs))
	if err != nil {
		return failAll(fmt.Errorf("from empty: %w", err))
	}
	s.logf("spawn_%d from empty: %s", n, fmtMs(empty))

	var held []string
	defer func() { s.cu.destroyAll(ctx, held) }()
	for len(held) < m {
		sbs, d, err := s.spawn(ctx, tag, min(heldChunk, m-len(held)))
		held = append(held, ids(sbs)...)
		if err != nil {
			return failAll(fmt.Errorf("hold %d running: %w", m, err))
		}
		s.logf("holding %d/%d sandboxes (last %d in %s)", len(held), m, len(sbs), fmtMs(d))
	}

	cpu := startCPU()
	sbs, d, err := s.spawn(ctx, tag, n)
	held = append(held, ids(sbs)...)
	if err != nil {
		return failAll(err)
	}
	spawn := latencyResult(name, []time.Duration{d})
	from := latencyResult("", []time.Duration{empty})
	spawn.Baseline = &baseline{Name: fmt.Sprintf("spawn_%d from empty", n), P50: from.P50, P99: from.P99, N: 1}
	x := round3(float64(d) / float64(empty))
	rows := []result{spawn, {Name: ratioName, Unit: unitRatio, P50: x, P99: x, N: 1}, cpu.perItem(cpuName, n)}
	s.logf("%s: %s (%.2fx from empty)", name, fmtMs(d), x)

	all := held
	held = nil
	return append(rows, s.killAll(ctx, all))
}

// killAll deletes the sandboxes ids as cove kill does, timed, as row
// kill_N.
func (s *snapBench) killAll(ctx context.Context, all []string) result {
	name := fmt.Sprintf("kill_%d", len(all))
	t0 := time.Now()
	left := s.cu.destroyAll(ctx, all)
	d := time.Since(t0)
	s.logf("%s: %s", name, fmtMs(d))
	if left > 0 {
		return failedResult(name, unitMs, fmt.Errorf("%d of %d sandboxes could not be deleted", left, len(all)))
	}
	return latencyResult(name, []time.Duration{d})
}

// ids are the sandboxes' ids.
func ids(sbs []apitype.SandboxInfo) []string {
	out := make([]string, len(sbs))
	for i, sb := range sbs {
		out[i] = sb.ID
	}
	return out
}
