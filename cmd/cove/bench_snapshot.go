package main

// cove bench's snapshot benchmarks: spawn from a snapshot, the warm pool,
// spawning many children and their memory, branch pauses, and spawning
// along a chain of branches. They make their own snapshots, tagged with a
// prefix unique to the run, and a benchCleanup deletes everything they
// made when they end, however they end.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// Units of the snapshot benchmarks' results, besides unitMs.
const (
	unitMiB   = "MiB"
	unitRatio = "x"
)

// coldBaselineName names the cold create baseline beside spawn rows.
const coldBaselineName = "cold create"

// snapshotsWanted reports whether any snapshot benchmark is to run.
func (o *benchOpts) snapshotsWanted() bool {
	return o.spawns > 0 || o.poolHandouts > 0 || o.spawnN > 0 ||
		(o.branches > 0 && len(o.branchMiB) > 0) || o.chainSamples > 0
}

// benchGroups maps the names --only and --skip take to the counts that,
// zeroed, turn the group's benchmarks off.
func (o *benchOpts) benchGroups() map[string][]*int {
	return map[string][]*int{
		"create":   {&o.creates},
		"exec":     {&o.execs},
		"eval":     {&o.evals},
		"transfer": {&o.fileMiB},
		"spawn":    {&o.spawns},
		"pool":     {&o.poolHandouts},
		"spawn100": {&o.spawnN}, // and pss_per_child
		"branch":   {&o.branches},
		"chain":    {&o.chainSamples},
	}
}

// selectGroups applies --only and --skip, comma-separated group names.
func (o *benchOpts) selectGroups(only, skip string) error {
	groups := o.benchGroups()
	names := func(list string) (map[string]bool, error) {
		set := make(map[string]bool)
		for n := range strings.SplitSeq(list, ",") {
			n = strings.TrimSpace(n)
			if n == "" {
				continue
			}
			if _, ok := groups[n]; !ok {
				return nil, fmt.Errorf("unknown benchmark %q; known: %s", n, strings.Join(slices.Sorted(maps.Keys(groups)), ", "))
			}
			set[n] = true
		}
		return set, nil
	}
	onlySet, err := names(only)
	if err != nil {
		return fmt.Errorf("--only: %w", err)
	}
	skipSet, err := names(skip)
	if err != nil {
		return fmt.Errorf("--skip: %w", err)
	}
	for name, counts := range groups {
		if skipSet[name] || (len(onlySet) > 0 && !onlySet[name]) {
			for _, c := range counts {
				*c = 0
			}
		}
	}
	return nil
}

// parseMiBList parses --branch-mib, such as "0,50,200".
func parseMiBList(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad size %q: want MiB, a whole number >= 0", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// runSnapshotBenches runs the snapshot benchmarks, adding their rows.
func (b *bencher) runSnapshotBenches(ctx context.Context, info apitype.Info, add func(benchResult)) {
	prefix := fmt.Sprintf("bench-%08x", rand.Uint32())
	cu := &benchCleanup{cl: b.cl, prefix: prefix, logf: b.logf}
	defer cu.run(ctx)
	s := &snapBench{bencher: b, cu: cu, prefix: prefix, ttl: ttlWithin(info, 20*time.Minute), info: info}

	// One snapshot, without a pool, serves spawn, spawn_N and chain.
	base := prefix
	var baseErr error
	if b.o.spawns > 0 || b.o.spawnN > 0 || b.o.chainSamples > 0 {
		t0 := time.Now()
		_, baseErr = s.build(ctx, base, 0)
		if baseErr == nil {
			add(latencyResult("snapshot_build", []time.Duration{time.Since(t0)}))
		} else {
			add(failedResult("snapshot_build", unitMs, baseErr))
		}
	}
	if b.o.spawns > 0 {
		if baseErr != nil {
			add(failedResult("spawn", unitMs, baseErr))
		} else {
			add(s.benchSpawn(ctx, base))
		}
	}
	if b.o.poolHandouts > 0 {
		add(s.benchPool(ctx))
	}
	if b.o.spawnN > 0 {
		// Several sizes (--backend qemu: 10 and 50); the Pss is measured
		// among the children of the last.
		ns := b.o.spawnNs
		if len(ns) == 0 {
			ns = []int{b.o.spawnN}
		}
		for i, n := range ns {
			last := i == len(ns)-1
			if baseErr != nil {
				add(failedResult(fmt.Sprintf("spawn_%d", n), unitMs, baseErr))
				if last {
					add(failedResult("pss_per_child", unitMiB, baseErr))
				}
				continue
			}
			spawn, pss := s.benchSpawnN(ctx, base, n, last)
			add(spawn)
			if last {
				add(pss)
			}
		}
	}
	if b.o.branches > 0 {
		for _, r := range s.benchBranch(ctx) {
			add(r)
		}
	}
	if b.o.chainSamples > 0 {
		if baseErr != nil {
			add(failedResult("chain_depth_0", unitMs, baseErr))
		} else {
			for _, r := range s.benchChain(ctx, base) {
				add(r)
			}
		}
	}
}

// snapBench holds what the snapshot benchmarks share.
type snapBench struct {
	*bencher
	cu     *benchCleanup
	prefix string // of every snapshot tag made here
	ttl    int64  // seconds, for every sandbox made here
	info   apitype.Info
}

// build builds snapshot tag from the default image with poolSize
// sandboxes in its pool.
func (s *snapBench) build(ctx context.Context, tag string, poolSize int) (apitype.SnapshotInfo, error) {
	s.logf("building snapshot %s (pool %d)", tag, poolSize)
	t0 := time.Now()
	si, err := s.cl.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: tag, PoolSize: &poolSize})
	if err != nil {
		return si, fmt.Errorf("build snapshot %s: %w", tag, err)
	}
	s.logf("built %s in %s: %s on disk", tag, fmtMs(time.Since(t0)), fmtBytes(si.SizeBytes))
	return si, nil
}

// spawn starts n sandboxes from tag, which cleanup then knows of, and
// returns them with how long the request took.
func (s *snapBench) spawn(ctx context.Context, tag string, n int) ([]apitype.SandboxInfo, time.Duration, error) {
	t0 := time.Now()
	sbs, err := s.cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: tag, N: n, TTLSecs: s.ttl})
	d := time.Since(t0)
	s.cu.addSandboxes(sbs...)
	if err == nil && len(sbs) != n {
		err = fmt.Errorf("asked for %d sandboxes from %s, got %d", n, tag, len(sbs))
	}
	if err != nil {
		return sbs, d, fmt.Errorf("spawn from %s: %w", tag, err)
	}
	return sbs, d, nil
}

// spawnOnce times spawning one sandbox from tag, then deletes it.
func (s *snapBench) spawnOnce(ctx context.Context, tag string) (time.Duration, error) {
	sbs, d, err := s.spawn(ctx, tag, 1)
	for _, sb := range sbs {
		s.cu.destroy(ctx, sb.ID)
	}
	return d, err
}

// benchSpawn times spawning one sandbox from a snapshot without a pool:
// a cold restore.
func (s *snapBench) benchSpawn(ctx context.Context, tag string) benchResult {
	lat, err := s.sample("spawn", 1, s.o.spawns, func() (time.Duration, error) { return s.spawnOnce(ctx, tag) })
	if err != nil {
		return failedResult("spawn", unitMs, err)
	}
	return latencyResult("spawn", lat)
}

// benchPool times hand-outs from a snapshot's warm pool, waiting for the
// pool to refill before each.
func (s *snapBench) benchPool(ctx context.Context) benchResult {
	const name = "pool_handout"
	tag := s.prefix + "-pool"
	si, err := s.build(ctx, tag, s.o.poolSize)
	defer s.cu.deleteSnapshot(ctx, tag) // frees the pool for what follows
	if err != nil {
		return failedResult(name, unitMs, err)
	}
	if si.PoolSize < 1 {
		return failedResult(name, unitMs, fmt.Errorf("asked for a pool of %d, the daemon keeps %d", s.o.poolSize, si.PoolSize))
	}
	once := func() (time.Duration, error) {
		if err := s.waitPool(ctx, tag); err != nil {
			return 0, err
		}
		return s.spawnOnce(ctx, tag)
	}
	lat, err := s.sample(name, 1, s.o.poolHandouts, once)
	if err != nil {
		return failedResult(name, unitMs, err)
	}
	return latencyResult(name, lat)
}

// waitPool waits until snapshot tag's pool is full.
func (s *snapBench) waitPool(ctx context.Context, tag string) error {
	const (
		every   = 20 * time.Millisecond
		timeout = 3 * time.Minute
	)
	t0 := time.Now()
	for {
		si, err := s.cl.GetSnapshot(ctx, tag)
		if err != nil {
			return fmt.Errorf("wait for the pool of %s: %w", tag, err)
		}
		if si.PoolReady >= si.PoolSize {
			if d := time.Since(t0); d > 5*time.Second {
				s.logf("the pool of %s took %s to fill", tag, d.Round(time.Second))
			}
			return nil
		}
		if time.Since(t0) > timeout {
			return fmt.Errorf("the pool of %s has %d of %d sandboxes ready after %s (over the memory budget?)",
				tag, si.PoolReady, si.PoolSize, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// benchSpawnN times one request for spawnN sandboxes from tag, then
// measures their memory: the Pss of their processes, per sandbox,
// beside that of one cold-started sandbox.
func (s *snapBench) benchSpawnN(ctx context.Context, tag string, n int, withPss bool) (spawn, pss benchResult) {
	name := fmt.Sprintf("spawn_%d", n)
	var base *benchBaseline
	baseErr := errors.New("not measured")
	if withPss {
		if base, baseErr = s.coldPss(ctx); baseErr != nil {
			s.logf("no cold Pss baseline: %v", baseErr)
		}
	}

	s.logf("spawning %d from %s", n, tag)
	sbs, d, err := s.spawn(ctx, tag, n)
	ids := make([]string, len(sbs))
	for i, sb := range sbs {
		ids[i] = sb.ID
	}
	defer s.cu.destroyAll(ctx, ids)
	if err != nil {
		return failedResult(name, unitMs, err), failedResult("pss_per_child", unitMiB, err)
	}
	spawn = latencyResult(name, []time.Duration{d})
	s.logf("%s: %s", name, fmtMs(d))
	if !withPss {
		return spawn, benchResult{}
	}

	pss, err = s.pssResult(ctx, ids)
	if err != nil {
		return spawn, failedResult("pss_per_child", unitMiB, err)
	}
	if baseErr == nil {
		pss.Baseline = base
	}
	return spawn, pss
}

// coldPss measures the Pss of one sandbox started cold from the image.
func (s *snapBench) coldPss(ctx context.Context) (*benchBaseline, error) {
	sbs, err := s.cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{N: 1, TTLSecs: s.ttl})
	s.cu.addSandboxes(sbs...)
	for _, sb := range sbs {
		defer s.cu.destroy(ctx, sb.ID)
	}
	if err == nil && len(sbs) != 1 {
		err = fmt.Errorf("asked for 1 sandbox, got %d", len(sbs))
	}
	if err != nil {
		return nil, err
	}
	r, err := s.pssResult(ctx, []string{sbs[0].ID})
	if err != nil {
		return nil, err
	}
	return &benchBaseline{Name: "cold sandbox", P50: r.P50, P99: r.P99, N: r.N}, nil
}

// pssResult waits for the sandboxes ids to settle and returns their Pss
// per sandbox, the total over their processes divided by their number.
func (s *snapBench) pssResult(ctx context.Context, ids []string) (benchResult, error) {
	select {
	case <-time.After(s.o.pssSettle):
	case <-ctx.Done():
		return benchResult{}, ctx.Err()
	}
	sums, err := pssBySandbox("/proc", ids, os.Getpid())
	if err != nil {
		return benchResult{}, err
	}
	var missing []string
	var totalKiB int64
	procs := 0
	for _, id := range ids {
		sum := sums[id]
		if sum.procs == 0 {
			missing = append(missing, id)
		}
		totalKiB += sum.kib
		procs += sum.procs
	}
	if len(missing) > 0 {
		return benchResult{}, fmt.Errorf("no processes found for %d of %d sandboxes (such as %s): run cove bench on the daemon's host",
			len(missing), len(ids), missing[0])
	}
	per := float64(totalKiB) / 1024 / float64(len(ids))
	s.logf("Pss of %d sandboxes: %s over %d processes, %.1f MiB each", len(ids), fmtBytes(totalKiB<<10), procs, per)
	return benchResult{Name: "pss_per_child", Unit: unitMiB, P50: round3(per), P99: round3(per), N: len(ids)}, nil
}

// pssSum is the memory of one sandbox's processes.
type pssSum struct {
	kib   int64
	procs int
}

// pssBySandbox sums the Pss of the processes under procRoot (/proc) whose
// command line names one of the sandboxes ids, by sandbox, leaving out
// process self. Reading another user's smaps_rollup needs root.
func pssBySandbox(procRoot string, ids []string, self int) (map[string]pssSum, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	out := make(map[string]pssSum)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "cmdline"))
		if err != nil {
			continue // gone
		}
		id := sandboxInCmdline(cmdline, want)
		if id == "" {
			continue
		}
		rollup, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "smaps_rollup"))
		switch {
		case errors.Is(err, fs.ErrPermission):
			return nil, fmt.Errorf("read the memory of process %d of sandbox %s: %w (run cove bench as root)", pid, id, err)
		case err != nil:
			continue // gone, or a kernel without smaps_rollup; a missing sandbox is reported
		}
		kib, err := parsePss(rollup)
		if err != nil {
			return nil, fmt.Errorf("process %d: %w", pid, err)
		}
		sum := out[id]
		sum.kib += kib
		sum.procs++
		out[id] = sum
	}
	return out, nil
}

// sandboxInCmdline returns the sandbox of want that the NUL-separated
// command line names as a whole word (as in --log=DIR/ID/runsc.log), or
// "".
func sandboxInCmdline(cmdline []byte, want map[string]bool) string {
	isWord := func(r rune) bool {
		return r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
	}
	for _, w := range bytes.FieldsFunc(cmdline, func(r rune) bool { return !isWord(r) }) {
		if want[string(w)] {
			return string(w)
		}
	}
	return ""
}

// parsePss returns the Pss line of a smaps_rollup file, in KiB.
func parsePss(rollup []byte) (int64, error) {
	for line := range strings.Lines(string(rollup)) {
		v, ok := strings.CutPrefix(line, "Pss:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, errors.New("smaps_rollup has no Pss line")
}

// branchSourceMiB is the memory of the sandbox branch pauses are measured
// on.
const branchSourceMiB = 1024

// benchBranch measures how long a branch pauses its source, with 0, 50
// and 200 MiB (--branch-mib) freshly written in the source before each
// branch.
func (s *snapBench) benchBranch(ctx context.Context) []benchResult {
	names := make([]string, len(s.o.branchMiB))
	for i, mib := range s.o.branchMiB {
		names[i] = fmt.Sprintf("branch_pause_%d", mib)
	}
	failAll := func(err error) []benchResult {
		rows := make([]benchResult, len(names))
		for i, n := range names {
			rows[i] = failedResult(n, unitMs, err)
		}
		return rows
	}
	mem := branchSourceMiB
	if m := s.info.Limits.MaxMemoryMiB; m > 0 && mem > m {
		mem = m
	}
	sbs, err := s.cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{N: 1, MemoryMiB: mem, TTLSecs: s.ttl})
	s.cu.addSandboxes(sbs...)
	for _, sb := range sbs {
		defer s.cu.destroy(ctx, sb.ID)
	}
	if err == nil && len(sbs) != 1 {
		err = fmt.Errorf("asked for 1 sandbox, got %d", len(sbs))
	}
	if err != nil {
		return failAll(fmt.Errorf("create the branch source: %w", err))
	}
	src := sbs[0]
	s.logf("branch source %s, %d MiB", src.ID, mem)

	rows := make([]benchResult, 0, len(names))
	for i, mib := range s.o.branchMiB {
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
	return rows
}

// branchPauses branches src s.o.branches times, each after writing mib
// MiB of random data in it, deletes the branches, and returns how long
// each paused src as its agent saw it, and how long the runtime had it
// stopped.
func (s *snapBench) branchPauses(ctx context.Context, src apitype.SandboxInfo, mib int, name string) (pauses, stops []float64, err error) {
	script := "rm -f /tmp/dirty"
	if mib > 0 {
		script = fmt.Sprintf("head -c %dM /dev/urandom > /tmp/dirty && sync", mib)
	}
	for i := range s.o.branches {
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
		br, err := s.cl.Branch(ctx, src.ID, apitype.BranchRequest{Tag: tag})
		d := time.Since(t0)
		s.cu.deleteSnapshot(ctx, tag)
		if err != nil {
			return nil, nil, fmt.Errorf("branch: %w", err)
		}
		pauses = append(pauses, br.PauseMs)
		stops = append(stops, br.StoppedMs)
		s.logf("%s %d/%d: paused %.1f ms (stopped %.1f ms), call %s, %s", name, i+1, s.o.branches, br.PauseMs, br.StoppedMs, fmtMs(d), fmtBytes(br.SizeBytes))
	}
	return pauses, stops, nil
}

// benchChain times spawning from snapshots at depth 0 (base) to
// chainDepth: from each, it spawns a child, changes a file in it and
// branches it to make the next.
func (s *snapBench) benchChain(ctx context.Context, base string) []benchResult {
	depth := s.o.chainDepth
	lat := make([][]time.Duration, 0, depth+1)
	err := func() error {
		tag := base
		for d := 0; ; d++ {
			var samples []time.Duration
			for range s.o.chainSamples {
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
	br, err := s.cl.Branch(ctx, child.ID, apitype.BranchRequest{Tag: next})
	if err != nil {
		return "", fmt.Errorf("branch %s: %w", child.ID, err)
	}
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
func chainRows(lat [][]time.Duration, depth int, err error) []benchResult {
	rows := make([]benchResult, 0, depth+2)
	for d := 0; d <= depth; d++ {
		if d < len(lat) {
			rows = append(rows, latencyResult(chainRowName(d), lat[d]))
		} else {
			rows = append(rows, failedResult(chainRowName(d), unitMs, err))
		}
	}
	ratio := benchResult{Name: chainRatioName(depth), Unit: unitRatio}
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

// msResult summarizes values already in milliseconds.
func msResult(name string, ms []float64) benchResult {
	sorted := slices.Clone(ms)
	slices.Sort(sorted)
	return benchResult{
		Name: name,
		Unit: unitMs,
		P50:  round3(percentile(sorted, 50)),
		P99:  round3(percentile(sorted, 99)),
		N:    len(sorted),
	}
}

// isSpawnRow reports whether the row is a snapshot benchmark's latency,
// which is shown beside the cold create baseline.
func isSpawnRow(name string) bool {
	switch {
	case name == "spawn", name == "pool_handout",
		strings.HasPrefix(name, "spawn_"),
		strings.HasPrefix(name, "chain_depth_") && !strings.HasSuffix(name, "_vs_0"):
		return true
	}
	return false
}

// addColdBaseline sets the baseline of the snapshot benchmarks' latency
// rows to the create row of the same run, if it succeeded.
func addColdBaseline(rows []benchResult) {
	i := slices.IndexFunc(rows, func(r benchResult) bool { return r.Name == "create" && r.Error == "" })
	if i < 0 {
		return
	}
	cold := rows[i]
	for j := range rows {
		r := &rows[j]
		if isSpawnRow(r.Name) && r.Unit == unitMs && r.Baseline == nil && r.Error == "" {
			r.Baseline = &benchBaseline{Name: coldBaselineName, P50: cold.P50, P99: cold.P99, N: cold.N}
		}
	}
}

// benchCleanup remembers the sandboxes the snapshot benchmarks made and
// deletes them, and every snapshot tagged with prefix, at the end.
type benchCleanup struct {
	cl     *client.Client
	prefix string
	logf   func(format string, args ...any)

	mu        sync.Mutex
	sandboxes map[string]bool // made and not yet deleted
	snapshots map[string]bool // asked for and not yet deleted
}

func (c *benchCleanup) addSandboxes(sbs ...apitype.SandboxInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sandboxes == nil {
		c.sandboxes = make(map[string]bool)
	}
	for _, sb := range sbs {
		c.sandboxes[sb.ID] = true
	}
}

// addSnapshot notes tag before it is asked for: the daemon may make it
// even if the request fails or is given up.
func (c *benchCleanup) addSnapshot(tag string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snapshots == nil {
		c.snapshots = make(map[string]bool)
	}
	c.snapshots[tag] = true
}

// cleanupTimeout bounds one delete during cleanup.
const cleanupTimeout = 30 * time.Second

// destroy deletes sandbox id, even if ctx is canceled.
func (c *benchCleanup) destroy(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	err := c.cl.DeleteSandbox(ctx, id)
	if err != nil && !errors.Is(err, client.ErrNotFound) {
		c.logf("warning: delete sandbox %s: %v", id, err)
		return // cleanup tries again
	}
	c.mu.Lock()
	delete(c.sandboxes, id)
	c.mu.Unlock()
}

// destroyAll deletes the sandboxes ids, a few at a time.
func (c *benchCleanup) destroyAll(ctx context.Context, ids []string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, killParallel)
	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c.destroy(ctx, id)
		})
	}
	wg.Wait()
}

// deleteSnapshot deletes snapshot tag, even if ctx is canceled, waiting
// a little for sandboxes being deleted to let go of it.
func (c *benchCleanup) deleteSnapshot(ctx context.Context, tag string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for {
		err := c.cl.DeleteSnapshot(ctx, tag)
		if err == nil || errors.Is(err, client.ErrNotFound) {
			c.mu.Lock()
			delete(c.snapshots, tag)
			c.mu.Unlock()
			return
		}
		if !errors.Is(err, client.ErrConflict) {
			c.logf("warning: delete snapshot %s: %v", tag, err)
			return
		}
		select {
		case <-ctx.Done():
			c.logf("warning: delete snapshot %s: %v", tag, err)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ours reports whether snapshot tag was made by this run.
func (c *benchCleanup) ours(tag string) bool {
	return tag == c.prefix || strings.HasPrefix(tag, c.prefix+"-")
}

// run deletes what is left: the sandboxes it knows of and those spawned
// from this run's snapshots, then the snapshots, deepest first.
func (c *benchCleanup) run(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	c.mu.Lock()
	ids := slices.Collect(maps.Keys(c.sandboxes))
	c.mu.Unlock()
	// A spawn that failed or was given up may still have made sandboxes.
	lctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	sbs, err := c.cl.ListSandboxes(lctx)
	cancel()
	if err != nil {
		c.logf("warning: list sandboxes to clean up: %v", err)
	}
	for _, sb := range sbs {
		if sb.SnapshotTag != "" && c.ours(sb.SnapshotTag) && !slices.Contains(ids, sb.ID) {
			ids = append(ids, sb.ID)
		}
	}
	if len(ids) > 0 {
		c.logf("cleaning up %d sandboxes", len(ids))
		c.destroyAll(ctx, ids)
	}

	depth := make(map[string]int)
	c.mu.Lock()
	for tag := range c.snapshots {
		depth[tag] = 0
	}
	c.mu.Unlock()
	lctx, cancel = context.WithTimeout(ctx, cleanupTimeout)
	sis, err := c.cl.ListSnapshots(lctx)
	cancel()
	if err != nil {
		c.logf("warning: list snapshots to clean up: %v", err)
	}
	for _, si := range sis {
		if c.ours(si.Tag) {
			depth[si.Tag] = si.Depth
		}
	}
	tags := slices.Collect(maps.Keys(depth))
	slices.SortFunc(tags, func(a, b string) int { return cmp.Or(cmp.Compare(depth[b], depth[a]), cmp.Compare(a, b)) })
	for _, tag := range tags {
		c.deleteSnapshot(ctx, tag)
	}
}
