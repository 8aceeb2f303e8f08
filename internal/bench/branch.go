package bench

// The branch benchmarks: how long a branch pauses its source, and spawning
// from snapshots along a chain of branches.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// branchSourceMiB is the memory of the sandbox branch pauses are measured
// on.
const branchSourceMiB = 1024

// benchBranch measures how long a branch pauses its source, with 0, 50
// and 200 MiB (--branch-mib) freshly written in the source before each
// branch.
func (s *snapBench) benchBranch(ctx context.Context) []result {
	names := make([]string, len(s.o.BranchMiB))
	for i, mib := range s.o.BranchMiB {
		names[i] = fmt.Sprintf("branch_pause_%d", mib)
	}
	failAll := func(err error) []result {
		rows := make([]result, len(names))
		for i, n := range names {
			rows[i] = failedResult(n, unitMs, err)
		}
		return rows
	}
	mem := branchSourceMiB
	if m := s.info.Limits.MaxMemoryMiB; m > 0 && mem > m {
		mem = m
	}
	src, release, err := s.createOne(ctx, apitype.CreateSandboxRequest{MemoryMiB: mem})
	defer release()
	if err != nil {
		return failAll(fmt.Errorf("create the branch source: %w", err))
	}
	s.logf("branch source %s, %d MiB", src.ID, mem)

	rows := make([]result, 0, len(names))
	for i, mib := range s.o.BranchMiB {
		if 2*mib > mem {
			rows = append(rows, failedResult(names[i], unitMs, fmt.Errorf("%d MiB does not fit well in a %d MiB sandbox", mib, mem)))
			continue
		}
		pauses, stops, err := s.branchPauses(ctx, src, mib, names[i])
		if err != nil {
			rows = append(rows, failedResult(names[i], unitMs, err))
			continue
		}
		r := msResult(names[i], pauses)
		st := msResult(fmt.Sprintf("branch_stopped_%d", mib), stops)
		s.logf("%s: pause p50 %.2f ms, p99 %.2f ms over %d; stopped p50 %.2f ms", r.Name, r.P50, r.P99, r.N, st.P50)
		rows = append(rows, r, st)
	}
	if s.o.BranchLoad > 0 && 2*loadedBranchMiB <= mem {
		rows = append(rows, s.benchBranchLoaded(ctx, src, rows))
	}
	return rows
}

// loadedBranchMiB is what the source has written before each branch timed
// beside busy sandboxes.
const loadedBranchMiB = 50

// benchBranchLoaded times the branch pause at loadedBranchMiB again while
// s.o.BranchLoad other sandboxes each keep a CPU busy: a user's host is
// busy, and the source's checkpoint competes with them. The unloaded row
// of the same size, if measured, is its baseline.
func (s *snapBench) benchBranchLoaded(ctx context.Context, src apitype.SandboxInfo, unloaded []result) result {
	name := fmt.Sprintf("branch_pause_%d_loaded", loadedBranchMiB)
	stop, err := s.busyLoad(ctx, s.o.BranchLoad)
	defer stop()
	if err != nil {
		return failedResult(name, unitMs, err)
	}
	pauses, _, err := s.branchPauses(ctx, src, loadedBranchMiB, name)
	if err != nil {
		return failedResult(name, unitMs, err)
	}
	r := msResult(name, pauses)
	if i := slices.IndexFunc(unloaded, func(u result) bool {
		return u.Name == fmt.Sprintf("branch_pause_%d", loadedBranchMiB) && u.Error == ""
	}); i >= 0 {
		r.Baseline = &baseline{Name: "unloaded", P50: unloaded[i].P50, P99: unloaded[i].P99, N: unloaded[i].N}
	}
	s.logf("%s: p50 %.2f ms with %d busy sandboxes", name, r.P50, s.o.BranchLoad)
	return r
}

// busyLoad starts n sandboxes that each spin one CPU; stop deletes them.
func (s *snapBench) busyLoad(ctx context.Context, n int) (stop func(), err error) {
	var releases []func()
	stop = func() {
		for _, r := range releases {
			r()
		}
	}
	for range n {
		sb, release, err := s.createOne(ctx, apitype.CreateSandboxRequest{})
		releases = append(releases, release)
		if err != nil {
			return stop, fmt.Errorf("start a busy sandbox: %w", err)
		}
		res, err := s.cl.Exec(ctx, sb.ID, sb.Token, apitype.ExecRequest{Shell: "while :; do :; done", Background: true})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
		}
		if err != nil {
			return stop, fmt.Errorf("make sandbox %s busy: %w", sb.ID, err)
		}
	}
	return stop, nil
}

// branchPauses branches src s.o.Branches times, each after writing mib
// MiB of random data in it, deletes the branches, and returns how long
// each paused src as its agent saw it, and how long the runtime had it
// stopped.
func (s *snapBench) branchPauses(ctx context.Context, src apitype.SandboxInfo, mib int, name string) (pauses, stops []float64, err error) {
	script := "rm -f /tmp/dirty"
	if mib > 0 {
		script = fmt.Sprintf("head -c %dM /dev/urandom > /tmp/dirty && sync", mib)
	}
	for i := range s.o.Branches {
		res, err := s.cl.Exec(ctx, src.ID, src.Token, apitype.ExecRequest{Shell: script, TimeoutSecs: 120})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
		}
		if err != nil {
			return nil, nil, fmt.Errorf("write %d MiB in the source: %w", mib, err)
		}
		tag := fmt.Sprintf("%s-b%d-%d", s.prefix, mib, i)
		s.cu.addSnapshot(tag)
		t0 := time.Now()
		br, err := s.cl.Branch(ctx, src.ID, src.Token, apitype.BranchRequest{Tag: tag})
		d := time.Since(t0)
		s.cu.deleteSnapshot(ctx, tag)
		if err != nil {
			return nil, nil, fmt.Errorf("branch: %w", err)
		}
		pauses = append(pauses, br.PauseMs)
		stops = append(stops, br.StoppedMs)
		s.logf("%s %d/%d: paused %.1f ms (stopped %.1f ms), call %s, %s", name, i+1, s.o.Branches, br.PauseMs, br.StoppedMs, fmtMs(d), humanize.IBytes(uint64(br.SizeBytes)))
	}
	return pauses, stops, nil
}

// benchChain times spawning from snapshots at depth 0 (base) to
// chainDepth: from each, it spawns a child, changes a file in it and
// branches it to make the next.
func (s *snapBench) benchChain(ctx context.Context, base string) []result {
	depth := s.o.ChainDepth
	lat := make([][]time.Duration, 0, depth+1)
	err := func() error {
		tag := base
		for d := 0; ; d++ {
			var samples []time.Duration
			for range s.o.ChainSamples {
				t, err := s.spawnOnce(ctx, tag)
				if err != nil {
					return fmt.Errorf("depth %d: %w", d, err)
				}
				samples = append(samples, t)
			}
			lat = append(lat, samples)
			r := latencyResult(chainRowName(d), samples)
			s.logf("%s: spawn p50 %.2f ms from %s", r.Name, r.P50, tag)
			if d == depth {
				return s.checkChain(ctx, tag, depth)
			}
			next, err := s.chainNext(ctx, tag, d)
			if err != nil {
				return fmt.Errorf("depth %d: %w", d+1, err)
			}
			tag = next
		}
	}()
	return chainRows(lat, depth, err)
}

// chainNext spawns a child of tag (at depth d), appends d to its
// /tmp/chain, and branches it into the next snapshot of the chain.
func (s *snapBench) chainNext(ctx context.Context, tag string, d int) (string, error) {
	sbs, _, err := s.spawn(ctx, tag, 1)
	for _, sb := range sbs {
		defer s.cu.destroy(ctx, sb.ID)
	}
	if err != nil {
		return "", err
	}
	child := sbs[0]
	res, err := s.cl.Exec(ctx, child.ID, child.Token, apitype.ExecRequest{
		Shell: fmt.Sprintf("echo %d >> /tmp/chain", d), TimeoutSecs: 30})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
	}
	if err != nil {
		return "", fmt.Errorf("write /tmp/chain in %s: %w", child.ID, err)
	}
	next := fmt.Sprintf("%s-chain%d", s.prefix, d+1)
	s.cu.addSnapshot(next)
	br, err := s.cl.Branch(ctx, child.ID, child.Token, apitype.BranchRequest{Tag: next})
	if err != nil {
		return "", fmt.Errorf("branch %s: %w", child.ID, err)
	}
	// Spawning from the branch takes the token of the child it copies,
	// which is gone by then.
	s.tokens[br.Tag] = child.Token
	if br.Depth != d+1 {
		s.logf("warning: branch %s reports depth %d, want %d", br.Tag, br.Depth, d+1)
	}
	if br.PoolSize > 0 {
		s.logf("warning: branch %s keeps a pool of %d: spawns from it may not be restores", br.Tag, br.PoolSize)
	}
	return br.Tag, nil
}

// checkChain checks that a child of the deepest snapshot has every
// level's line in /tmp/chain.
func (s *snapBench) checkChain(ctx context.Context, tag string, depth int) error {
	if depth == 0 {
		return nil
	}
	sbs, _, err := s.spawn(ctx, tag, 1)
	for _, sb := range sbs {
		defer s.cu.destroy(ctx, sb.ID)
	}
	if err != nil {
		return fmt.Errorf("check the chain: %w", err)
	}
	res, err := s.cl.Exec(ctx, sbs[0].ID, sbs[0].Token, apitype.ExecRequest{Args: []string{"cat", "/tmp/chain"}, TimeoutSecs: 30})
	if err != nil {
		return fmt.Errorf("check the chain: %w", err)
	}
	var want strings.Builder
	for d := range depth {
		fmt.Fprintf(&want, "%d\n", d)
	}
	if res.Stdout != want.String() {
		return fmt.Errorf("a child at depth %d has /tmp/chain %q, want %q", depth, res.Stdout, want.String())
	}
	return nil
}

func chainRowName(d int) string { return fmt.Sprintf("chain_depth_%d", d) }

// chainRatioName names the row of spawn time at depth over that at
// depth 0.
func chainRatioName(depth int) string { return fmt.Sprintf("chain_depth_%d_vs_0", depth) }

// chainRows makes a row per depth 0..depth from the spawn times measured
// at each (lat[d]), failed rows for the depths err kept from being
// measured, and the ratio of the deepest level's p50 to depth 0's.
func chainRows(lat [][]time.Duration, depth int, err error) []result {
	rows := make([]result, 0, depth+2)
	for d := 0; d <= depth; d++ {
		if d < len(lat) {
			rows = append(rows, latencyResult(chainRowName(d), lat[d]))
		} else {
			rows = append(rows, failedResult(chainRowName(d), unitMs, err))
		}
	}
	ratio := result{Name: chainRatioName(depth), Unit: unitRatio}
	switch {
	case err != nil:
		ratio.Error = err.Error()
	case depth == 0:
		return rows
	case rows[0].P50 <= 0:
		ratio.Error = "depth 0 took no time"
	default:
		r := round3(rows[depth].P50 / rows[0].P50)
		ratio.P50, ratio.P99, ratio.N = r, r, 1
	}
	return append(rows, ratio)
}
