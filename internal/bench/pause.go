package bench

// Pause/resume and checkpoint/rollback: how long each takes beside a cold
// create timed in the same run, and the disk a paused sandbox takes.

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// pauseColdCreates is how many cold creates the pause rows' baseline
// times at most.
const pauseColdCreates = 3

// benchPause pauses and resumes one sandbox (a warm interpreter and a
// written file in it) b.o.Pauses times, then checkpoints it as many
// times and rolls it back to the first checkpoint as often.
func (b *bencher) benchPause(ctx context.Context, info apitype.Info) []result {
	names := []string{"pause", "resume", "checkpoint", "rollback"}
	fail := func(err error) []result {
		out := make([]result, 0, len(names)+1)
		for _, n := range names {
			out = append(out, failedResult(n, unitMs, err))
		}
		return append(out, failedResult("paused_disk", unitMiB, err))
	}
	cold, err := b.coldCreates(ctx, info, min(pauseColdCreates, b.o.Pauses))
	if err != nil {
		return fail(fmt.Errorf("cold create: %w", err))
	}
	sb, err := b.createOne(ctx, info, apitype.CreateSandboxRequest{})
	if err != nil {
		return fail(fmt.Errorf("create the sandbox: %w", err))
	}
	defer b.destroy(ctx, sb.ID)
	if _, err := b.cl.Eval(ctx, sb.ID, sb.Token, apitype.EvalRequest{Code: "import json, sqlite3; x = list(range(100000))"}); err != nil {
		return fail(fmt.Errorf("warm the interpreter: %w", err))
	}
	if _, err := b.cl.Exec(ctx, sb.ID, sb.Token, apitype.ExecRequest{Shell: "head -c 4M /dev/urandom > /work/blob"}); err != nil {
		return fail(fmt.Errorf("write a file: %w", err))
	}
	var pause, resume, ckpt, rollback []time.Duration
	var disk []float64
	timed := func(lat *[]time.Duration, f func() error) error {
		t0 := time.Now()
		if err := f(); err != nil {
			return err
		}
		*lat = append(*lat, time.Since(t0))
		return nil
	}
	for i := range b.o.Pauses {
		var paused apitype.SandboxInfo
		if err := timed(&pause, func() (err error) { paused, err = b.cl.PauseSandbox(ctx, sb.ID); return err }); err != nil {
			return fail(fmt.Errorf("pause %d: %w", i, err))
		}
		disk = append(disk, float64(paused.PausedBytes)/(1<<20))
		if err := timed(&resume, func() error { _, err := b.cl.ResumeSandbox(ctx, sb.ID, 0); return err }); err != nil {
			return fail(fmt.Errorf("resume %d: %w", i, err))
		}
	}
	for i := range b.o.Pauses {
		name := fmt.Sprintf("bench-%d", i)
		if err := timed(&ckpt, func() error { _, err := b.cl.Checkpoint(ctx, sb.ID, sb.Token, name); return err }); err != nil {
			return fail(fmt.Errorf("checkpoint %d: %w", i, err))
		}
	}
	for i := range b.o.Pauses {
		if err := timed(&rollback, func() error { _, err := b.cl.Rollback(ctx, sb.ID, sb.Token, "bench-0"); return err }); err != nil {
			return fail(fmt.Errorf("rollback %d: %w", i, err))
		}
	}
	b.logf("pause: %d pauses, resumes, checkpoints and rollbacks of %s", b.o.Pauses, sb.ID)
	coldBase := latencyResult("cold create", cold)
	out := make([]result, 0, len(names)+1)
	for i, lat := range [][]time.Duration{pause, resume, ckpt, rollback} {
		r := latencyResult(names[i], lat)
		r.Baseline = &baseline{Name: "cold create", P50: coldBase.P50, P99: coldBase.P99, N: coldBase.N}
		out = append(out, r)
	}
	d := msResult("paused_disk", disk) // the same percentiles, of MiB
	d.Unit = unitMiB
	return append(out, d)
}

// coldCreates times n creates of one sandbox from the image, each
// deleted after.
func (b *bencher) coldCreates(ctx context.Context, info apitype.Info, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		sb, err := b.createOne(ctx, info, apitype.CreateSandboxRequest{})
		if err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
		b.destroy(ctx, sb.ID)
	}
	return lat, nil
}
