package bench

// The snapshot benchmarks: spawn from a snapshot, the warm pool and
// spawning many children, with their memory (pss.go), branch pauses and a
// chain of branches (branch.go). They make their own snapshots, tagged
// with a prefix unique to the run, and a cleanup deletes everything they
// made when they end, however they end.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// runSnapshotBenches runs the snapshot benchmarks, adding their rows.
func (b *bencher) runSnapshotBenches(ctx context.Context, info apitype.Info, add func(result)) {
	prefix := "bench-" + randhex.New(4)
	cu := &cleanup{cl: b.cl, prefix: prefix, logf: b.logf}
	defer cu.run(ctx)
	s := &snapBench{bencher: b, cu: cu, prefix: prefix, ttl: ttlWithin(info, 20*time.Minute), info: info,
		tokens: map[string]string{}}

	// One snapshot, without a pool, serves spawn, spawn_N and chain.
	base := prefix
	var baseErr error
	if b.o.Spawns > 0 || b.o.SpawnN > 0 || b.o.ChainSamples > 0 {
		t0 := time.Now()
		_, baseErr = s.build(ctx, base, 0, 0)
		if baseErr == nil {
			add(latencyResult("snapshot_build", []time.Duration{time.Since(t0)}))
		} else {
			add(failedResult("snapshot_build", unitMs, baseErr))
		}
	}
	if b.o.Spawns > 0 {
		if baseErr != nil {
			add(failedResult("spawn", unitMs, baseErr))
		} else {
			add(s.benchSpawn(ctx, base))
		}
	}
	if b.o.PoolHandouts > 0 {
		add(s.benchPool(ctx))
	}
	if b.o.SpawnN > 0 {
		// Several sizes (--backend qemu: 10 and 50); the Pss is measured
		// among the children of the last.
		ns := b.o.SpawnNs
		if len(ns) == 0 {
			ns = []int{b.o.SpawnN}
		}
		for i, n := range ns {
			last := i == len(ns)-1
			if baseErr != nil {
				add(failedResult(fmt.Sprintf("spawn_%d", n), unitMs, baseErr))
				add(failedResult(cpuPerChildName(n), unitSeconds, baseErr))
				if last {
					add(failedResult("pss_per_child", unitMiB, baseErr))
				}
				continue
			}
			spawn, cpu, pss := s.benchSpawnN(ctx, base, n, last)
			add(spawn)
			add(cpu)
			if last {
				add(pss)
			}
		}
	}
	if b.o.SpawnN > 0 && b.o.SpawnWith > 0 {
		for _, r := range s.benchSpawnWith(ctx, b.o.SpawnN, b.o.SpawnWith) {
			add(r)
		}
	}
	if b.o.Branches > 0 {
		for _, r := range s.benchBranch(ctx) {
			add(r)
		}
	}
	if b.o.ChainSamples > 0 {
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
	cu     *cleanup
	prefix string // of every snapshot tag made here
	ttl    int64  // seconds, for every sandbox made here
	info   apitype.Info
	// tokens holds, by tag, the sandbox token that spawning from a
	// branch made here takes: that of the sandbox it was saved from.
	tokens map[string]string
}

// build builds snapshot tag from the default image with poolSize
// sandboxes in its pool, its sandboxes given memoryMiB (0: the daemon's
// default).
func (s *snapBench) build(ctx context.Context, tag string, poolSize, memoryMiB int) (apitype.SnapshotInfo, error) {
	s.logf("building snapshot %s (pool %d)", tag, poolSize)
	t0 := time.Now()
	si, err := s.cl.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: tag, PoolSize: &poolSize, MemoryMiB: memoryMiB})
	if err != nil {
		return si, fmt.Errorf("build snapshot %s: %w", tag, err)
	}
	s.logf("built %s in %s: %s on disk", tag, fmtMs(time.Since(t0)), humanize.IBytes(uint64(si.SizeBytes)))
	return si, nil
}

// spawn starts n sandboxes from tag, which cleanup then knows of, and
// returns them with how long the request took.
func (s *snapBench) spawn(ctx context.Context, tag string, n int) ([]apitype.SandboxInfo, time.Duration, error) {
	t0 := time.Now()
	sbs, err := s.cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{SnapshotTag: tag, N: n, TTLSecs: s.ttl,
		SandboxToken: s.tokens[tag]})
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

// createOne cold-starts one sandbox, which cleanup then knows of; release
// deletes what the request made, whether or not it succeeded.
func (s *snapBench) createOne(ctx context.Context, req apitype.CreateSandboxRequest) (sb apitype.SandboxInfo, release func(), err error) {
	req.N, req.TTLSecs = 1, s.ttl
	sbs, err := s.cl.CreateSandboxes(ctx, req)
	s.cu.addSandboxes(sbs...)
	release = func() {
		for _, sb := range sbs {
			s.cu.destroy(ctx, sb.ID)
		}
	}
	if err == nil && len(sbs) != 1 {
		err = fmt.Errorf("asked for 1 sandbox, got %d", len(sbs))
	}
	if err != nil {
		return sb, release, err
	}
	return sbs[0], release, nil
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
func (s *snapBench) benchSpawn(ctx context.Context, tag string) result {
	lat, err := s.sample("spawn", 1, s.o.Spawns, func() (time.Duration, error) { return s.spawnOnce(ctx, tag) })
	if err != nil {
		return failedResult("spawn", unitMs, err)
	}
	return latencyResult("spawn", lat)
}

// benchPool times hand-outs from a snapshot's warm pool, waiting for the
// pool to refill before each.
func (s *snapBench) benchPool(ctx context.Context) result {
	const name = "pool_handout"
	tag := s.prefix + "-pool"
	si, err := s.build(ctx, tag, s.o.PoolSize, 0)
	defer s.cu.deleteSnapshot(ctx, tag) // frees the pool for what follows
	if err != nil {
		return failedResult(name, unitMs, err)
	}
	if si.PoolSize < 1 {
		return failedResult(name, unitMs, fmt.Errorf("asked for a pool of %d, the daemon keeps %d", s.o.PoolSize, si.PoolSize))
	}
	once := func() (time.Duration, error) {
		if err := s.waitPool(ctx, tag); err != nil {
			return 0, err
		}
		return s.spawnOnce(ctx, tag)
	}
	lat, err := s.sample(name, 1, s.o.PoolHandouts, once)
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

func cpuPerChildName(n int) string { return fmt.Sprintf("cpu_per_child_%d", n) }

// benchSpawnN times one request for spawnN sandboxes from tag and the
// host CPU time it took per child, then measures their memory: the Pss of
// their processes, per sandbox, beside that of one cold-started sandbox.
func (s *snapBench) benchSpawnN(ctx context.Context, tag string, n int, withPss bool) (spawn, cpu, pss result) {
	name := fmt.Sprintf("spawn_%d", n)
	var base *baseline
	baseErr := errors.New("not measured")
	if withPss {
		if base, baseErr = s.coldPss(ctx); baseErr != nil {
			s.logf("no cold Pss baseline: %v", baseErr)
		}
	}

	s.logf("spawning %d from %s", n, tag)
	meter := startCPU()
	sbs, d, err := s.spawn(ctx, tag, n)
	cpu = meter.perItem(cpuPerChildName(n), n)
	children := ids(sbs)
	defer s.cu.destroyAll(ctx, children)
	if err != nil {
		return failedResult(name, unitMs, err), failedResult(cpu.Name, unitSeconds, err), failedResult("pss_per_child", unitMiB, err)
	}
	spawn = latencyResult(name, []time.Duration{d})
	s.logf("%s: %s, %.3f CPU-s per child", name, fmtMs(d), cpu.P50)
	if !withPss {
		return spawn, cpu, result{}
	}

	pss, err = s.pssResult(ctx, children)
	if err != nil {
		return spawn, cpu, failedResult("pss_per_child", unitMiB, err)
	}
	if baseErr == nil {
		pss.Baseline = base
	}
	return spawn, cpu, pss
}
