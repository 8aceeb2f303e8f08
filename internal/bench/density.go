package bench

// Density: how many idle sandboxes this host holds, each still answering
// exec, spawned in batches until the host's available memory would cross a
// floor the bench never crosses (or the daemon refuses more); what each
// costs the host in memory and idle CPU; and how long killing them all
// takes.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-sandbox/cove/internal/hostres"
	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// DensityOptions shape the density benchmark.
type DensityOptions struct {
	// FloorMiB is the host memory (MemAvailable) the bench leaves free: it
	// spawns no batch that its estimate says would cross it.
	FloorMiB int64
	Batch    int           // sandboxes per spawn call
	Idle     time.Duration // how long idle CPU is measured over, after the last batch
}

// densityGuessMiB is the host memory a sandbox is assumed to take before
// the first batch has measured it.
const densityGuessMiB = 64

// execParallel bounds the concurrent execs that check every sandbox answers.
const execParallel = 8

// Density rows.
const (
	unitSandboxes = "sandboxes"
	unitPctCore   = "% of a core"
)

// benchDensity runs the density benchmark for up to o.DensityMax sandboxes.
func (b *bencher) benchDensity(ctx context.Context, info apitype.Info) []result {
	prefix := "bench-" + randhex.New(4)
	cu := &cleanup{cl: b.cl, prefix: prefix, logf: b.logf}
	defer cu.run(ctx)
	s := &snapBench{bencher: b, cu: cu, prefix: prefix, ttl: ttlWithin(info, time.Hour), info: info, tokens: map[string]string{}}
	d := densityRun{snapBench: s, o: b.o.DensityOpts, max: b.o.DensityMax}
	return d.run(ctx)
}

type densityRun struct {
	*snapBench
	o    DensityOptions
	max  int
	held []apitype.SandboxInfo
	why  string // why it stopped short of max
}

func (d *densityRun) run(ctx context.Context) []result {
	fail := func(err error) []result {
		return []result{failedResult("density_held", unitSandboxes, err)}
	}
	tag := d.prefix + "-density"
	d.cu.addSnapshot(tag)
	if _, err := d.build(ctx, tag, 0, manyMemoryMiB); err != nil {
		return fail(err)
	}
	defer d.cu.deleteSnapshot(ctx, tag)

	idleBefore, err := d.idleCPU(ctx, d.o.Idle/3)
	if err != nil {
		return fail(err)
	}
	before, err := hostres.Read()
	if err != nil {
		return fail(err)
	}
	defer func() { d.cu.destroyAll(ctx, ids(d.held)) }()
	avail := d.fill(ctx, tag, before)
	if len(d.held) == 0 {
		return fail(fmt.Errorf("no sandbox held: %s", d.why))
	}
	n := len(d.held)
	d.logf("holding %d sandboxes (%s); idle for %s", n, d.why, d.o.Idle)
	idle, err := d.idleCPU(ctx, d.o.Idle)
	if err != nil {
		return fail(err)
	}
	answered := d.execAll(ctx)

	held := result{Name: "density_held", Unit: unitSandboxes, P50: float64(n), P99: float64(n), N: n}
	if answered < n {
		held.Error = fmt.Sprintf("%d of %d held sandboxes did not answer exec", n-answered, n)
	}
	mem := round3(float64(before.MemAvailableMiB-avail) / float64(n))
	each, before0 := pctCoreEach(idle, d.o.Idle, n), pctCoreEach(idleBefore, d.o.Idle/3, n)
	cpu := result{Name: "density_idle_cpu_per_sandbox", Unit: unitPctCore, N: n, P50: each, P99: each,
		// The host with none of them, spread as if over as many.
		Baseline: &baseline{Name: "host before, same share", P50: before0, P99: before0, N: 1}}
	rows := []result{held,
		{Name: "density_memory_per_sandbox", Unit: unitMiB, P50: mem, P99: mem, N: n},
		cpu}
	d.logf("%d held, %d answered; %.1f MiB and %.3f%% of a core each", n, answered, mem, cpu.P50)

	all := ids(d.held)
	d.held = nil
	return append(rows, d.killAll(ctx, all))
}

// pctCoreEach is busy CPU time c over a stretch of length over, as a
// percentage of one core, shared among k sandboxes.
func pctCoreEach(c, over time.Duration, k int) float64 {
	return round3(100 * c.Seconds() / over.Seconds() / float64(k))
}

// fill spawns batches until max, the floor, or a refusal, and returns the
// host's available memory at the end.
func (d *densityRun) fill(ctx context.Context, tag string, before hostres.Reading) (availMiB int64) {
	avail := before.MemAvailableMiB
	for len(d.held) < d.max {
		per := int64(densityGuessMiB)
		if len(d.held) > 0 {
			per = max(1, (before.MemAvailableMiB-avail)/int64(len(d.held)))
		}
		next := min(d.o.Batch, d.max-len(d.held))
		if fits := (avail - d.o.FloorMiB) / per; int64(next) > fits {
			next = int(max(fits, 0))
		}
		if next == 0 {
			d.why = fmt.Sprintf("stopped at the memory floor: %d MiB available, %d MiB each, floor %d MiB", avail, per, d.o.FloorMiB)
			return avail
		}
		sbs, t, err := d.spawn(ctx, tag, next)
		d.held = append(d.held, sbs...)
		if err != nil {
			d.why = fmt.Sprintf("the daemon refused more: %v", err)
			return d.available(avail)
		}
		avail = d.available(avail)
		d.logf("holding %d sandboxes (batch of %d in %s), %d MiB available", len(d.held), next, fmtMs(t), avail)
	}
	d.why = fmt.Sprintf("reached --density-max %d", d.max)
	return avail
}

func (d *densityRun) available(last int64) int64 {
	r, err := hostres.Read()
	if err != nil {
		d.logf("warning: host memory: %v", err)
		return last
	}
	return r.MemAvailableMiB
}

// idleCPU is the host's busy CPU time over a stretch of doing nothing.
func (d *densityRun) idleCPU(ctx context.Context, over time.Duration) (time.Duration, error) {
	t0, err := hostCPU()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(over):
	}
	t1, err := hostCPU()
	return t1 - t0, err
}

// execAll runs `true` in every held sandbox and counts those that
// answered.
func (d *densityRun) execAll(ctx context.Context) int {
	var ok atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, execParallel)
	for _, sb := range d.held {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			res, err := d.cl.Exec(ctx, sb.ID, sb.Token, apitype.ExecRequest{Args: []string{"true"}, TimeoutSecs: 60})
			switch {
			case err != nil:
				d.logf("exec in %s: %v", sb.ID, err)
			case res.ExitCode != 0:
				d.logf("exec in %s: exit %d", sb.ID, res.ExitCode)
			default:
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return int(ok.Load())
}
